"""Tests of `fork` and `refresh` (the maintainers' quilt cycle)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

from absl.testing import absltest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from migration import manifest as manifest_lib  # noqa: E402

PATCHES = os.path.join(REPO, 'patches')


class ForkTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.tmp = tempfile.mkdtemp(prefix='fork-test-')
    self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
    self.patches = os.path.join(self.tmp, 'patches')
    shutil.copytree(PATCHES, self.patches)
    self.fork = os.path.join(self.tmp, 'jax_fork')
    self.manifest = manifest_lib.load(PATCHES)
    self.version = self.manifest.served_versions()[-1]
    self.series = self.manifest.series_for(self.version)

  def run_tool(self, *args, expect=0, env=None):
    full_env = dict(os.environ, PYTHONPATH=REPO, **(env or {}))
    proc = subprocess.run(
        [sys.executable, '-m', 'migration', *args,
         f'--patches_dir={self.patches}'],
        cwd=self.tmp, env=full_env, capture_output=True, text=True,
        check=False)
    self.assertEqual(proc.returncode, expect,
                     f'stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}')
    return proc

  def git(self, *args):
    env = dict(os.environ, GIT_AUTHOR_NAME='M', GIT_AUTHOR_EMAIL='m@x',
               GIT_COMMITTER_NAME='M', GIT_COMMITTER_EMAIL='m@x')
    return subprocess.run(['git', *args], cwd=os.path.join(self.fork, 'jax'),
                          env=env, capture_output=True, text=True,
                          check=True).stdout

  def read_patches(self):
    d = os.path.join(self.patches, self.series.name)
    return {n: open(os.path.join(d, n), 'rb').read() for n in os.listdir(d)}

  def test_fork_then_refresh_is_byte_identical(self):
    before = self.read_patches()
    with open(os.path.join(self.patches, 'manifest.json'), 'rb') as f:
      manifest_before = f.read()
    data = json.loads(self.run_tool('fork', '--json').stdout)
    self.assertEqual(data['version'], self.version)
    log = self.git('log', '--format=%s').splitlines()
    self.assertEqual(log[::-1][1:], [p.subject for p in self.series.patches])
    self.assertEqual(self.git('status', '--porcelain'), '')
    tracked = self.git('ls-files', '--full-name').split()
    self.assertTrue(all(t.startswith('jax/_src/') for t in tracked), tracked)
    self.run_tool('refresh')
    self.assertEqual(self.read_patches(), before)
    with open(os.path.join(self.patches, 'manifest.json'), 'rb') as f:
      self.assertEqual(f.read(), manifest_before)

  def test_edit_amend_refresh(self):
    self.run_tool('fork')
    last = self.series.patches[-1]
    target = last.files[0]
    with open(os.path.join(self.fork, *target.split('/')), 'a') as f:
      f.write('# maintained\n')
    proc = self.run_tool('refresh', expect=4)
    self.assertIn('uncommitted changes', proc.stderr)
    self.git('commit', '-qa', '--amend', '--no-edit')
    self.run_tool('refresh')
    after = self.read_patches()
    self.assertIn('+# maintained', after[last.name].decode())
    self.assertIn('Forwarded:', after[last.name].decode())
    manifest = manifest_lib.load(self.patches)  # Regenerated and current.
    self.assertNotEqual(manifest.series[self.series.name].patches[-1].sha256,
                        last.sha256)

  def test_bad_inputs(self):
    proc = self.run_tool('refresh', expect=2)
    self.assertIn('run `python -m migration fork` first', proc.stderr)
    self.run_tool('fork', '--version=0.6.0', expect=3)
    self.assertFalse(os.path.exists(os.path.join(self.fork, 'jax')))
    proc = self.run_tool('fork', env={'PATH': self.tmp}, expect=5)
    self.assertIn('git is not installed', proc.stderr)
    self.run_tool('fork')
    proc = self.run_tool('fork', expect=4)
    self.assertIn('already exists', proc.stderr)

  def test_repository_keeps_upstream_files_out_of_git(self):
    readme = os.path.join(REPO, 'jax_fork', 'README.md')
    self.assertTrue(os.path.isfile(readme))
    if not os.path.isdir(os.path.join(REPO, '.git')):
      self.skipTest('not a git checkout')
    ignored = subprocess.run(
        ['git', 'check-ignore', '-q',
         'jax_fork/jax/_src/pallas/mosaic/interpret/shared_memory.py'],
        cwd=REPO, check=False)
    self.assertEqual(ignored.returncode, 0)
    kept = subprocess.run(['git', 'check-ignore', '-q', 'jax_fork/README.md'],
                          cwd=REPO, check=False)
    self.assertEqual(kept.returncode, 1)


if __name__ == '__main__':
  absltest.main()
