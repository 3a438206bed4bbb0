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
_NEWEST = manifest_lib.load(PATCHES).served_versions()[-1]
# The multi-series tests need no jax; they run once in CI (with the newest
# release), not once per minor line.
ONCE = os.environ.get('JAX_INTERPRET_PATCHES_TEST_VERSION', _NEWEST) == _NEWEST


# A line that the local-signal patch adds, and the fixup the tests carry.
_SIGNAL_LINE = '    # to `tpu.sem_signal`, which signals the issuing core.\n'
_CARRIED = (b'+    # to `tpu.sem_signal`, which signals the issuing core'
            b' (carried).\n')


class _ForkCase(absltest.TestCase):
  """A copy of patches/ and a fork folder in a temporary directory."""

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
        [sys.executable, '-m', 'jax_fork', *args,
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


class ForkTest(_ForkCase):

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
    # The released files of the folder the series touches: the interpreter.
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
    self.assertIn('run `python -m jax_fork fork` first', proc.stderr)
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


def _tree_bytes(root):
  out = {}
  for d, _, files in os.walk(root):
    for n in files:
      path = os.path.join(d, n)
      with open(path, 'rb') as f:
        out[os.path.relpath(path, root)] = f.read()
  return out


@absltest.skipUnless(ONCE, 'runs once, with the newest jax release')
class ForkAllTest(_ForkCase):
  """`fork --all`, `carry` and `refresh --all`: one branch per series."""

  def branch_subjects(self, branch, version):
    return self.git('log', '--reverse', '--format=%s',
                    f'upstream/{version}..{branch}').splitlines()

  def base(self, series):
    return sorted(series.hashes, key=manifest_lib.version_key)[0]

  def test_fork_all_then_refresh_all_is_byte_identical(self):
    before = _tree_bytes(self.patches)
    data = json.loads(self.run_tool('fork', '--all', '--json').stdout)
    self.assertEqual(sorted(b['series'] for b in data['branches']),
                     sorted(self.manifest.series))
    branches = self.git('for-each-ref', '--format=%(refname:short)',
                        'refs/heads/').split()
    self.assertEqual(sorted(branches), sorted(self.manifest.series))
    self.assertEqual(self.git('branch', '--show-current').strip(),
                     self.series.name)
    for s in self.manifest.series.values():
      self.assertEqual(self.branch_subjects(s.name, self.base(s)),
                       [p.subject for p in s.patches], s.name)
      # The branch starts at the released files: one root commit.
      roots = self.git('rev-list', '--max-parents=0', s.name).split()
      self.assertLen(roots, 1)
      self.assertEqual(
          self.git('rev-parse', f'upstream/{self.base(s)}^{{commit}}').strip(),
          roots[0])
    self.assertEqual(self.git('status', '--porcelain'), '')
    self.run_tool('refresh', '--all')
    self.assertEqual(_tree_bytes(self.patches), before)
    self.run_tool('drift')  # Unchanged series: no new drift.

  def commit_fixup(self):
    """Commits, on the checked-out branch, a fix to the local-signal patch.

    Returns:
      The patch and the fixup commit.
    """
    signal = next(p for p in self.series.patches
                  if 'signal the calling core' in p.subject)
    path = os.path.join(self.fork, *signal.files[0].split('/'))
    with open(path, encoding='utf-8') as f:
      text = f.read()
    self.assertEqual(text.count(_SIGNAL_LINE), 1)
    with open(path, 'w', encoding='utf-8') as f:
      f.write(text.replace(_SIGNAL_LINE, _CARRIED[1:].decode()))
    target = self.git('log', '--format=%H', '-1', '--fixed-strings',
                      f'--grep={signal.subject}').strip()
    self.git('commit', '-qa', f'--fixup={target}')
    return signal, self.git('rev-parse', 'HEAD').strip()

  def test_carry_stops_at_a_conflict_then_carries_and_drift_sees_the_rest(
      self):
    self.run_tool('fork', '--all')
    signal, fix = self.commit_fixup()
    # 0.8.0 makes this change in shared_memory.py: the 3-way merge conflicts.
    old = self.git('rev-parse', 'jax-0.8.0').strip()
    proc = self.run_tool('carry', fix, '--onto=jax-0.8.0', expect=4)
    self.assertIn('jax-0.8.0: jax/_src/pallas/mosaic/interpret/'
                  'interpret_pallas_call.py:', proc.stderr)
    self.assertIn('hunk #1 (def semaphore_signal(', proc.stderr)
    self.assertEqual(self.git('rev-parse', 'jax-0.8.0').strip(), old)
    self.assertEqual(self.git('status', '--porcelain'), '')
    self.assertEqual(self.git('rev-parse', 'HEAD').strip(), fix)
    onto = ['jax-0.11.2', 'jax-0.11.1']
    self.run_tool('carry', fix, '--onto=' + ','.join(onto))
    for name in [*onto, self.series.name]:
      s = self.manifest.series[name]
      self.assertEqual(self.branch_subjects(name, self.base(s)),
                       [p.subject for p in s.patches], name)
    before = _tree_bytes(self.patches)
    self.run_tool('refresh', '--all')
    after = _tree_bytes(self.patches)
    changed = {k.split(os.sep)[0] for k in after if after[k] != before[k]}
    self.assertEqual(changed, {*onto, self.series.name, 'manifest.json'})
    for name in [*onto, self.series.name]:
      self.assertIn(_CARRIED, after[os.path.join(name, signal.name)])
    manifest_lib.load(self.patches)  # Regenerated and current.
    proc = self.run_tool('drift', expect=7)
    number = [p.subject for p in self.series.patches].index(
        signal.subject) + 1
    behind = sorted(set(self.manifest.series) - {*onto, self.series.name})
    for name in behind:
      self.assertRegex(proc.stdout, rf'{name} [#0-9, ]*#{number}\b')
    for name in onto:
      self.assertNotRegex(proc.stdout, rf'{name} [#0-9, ]*#{number}\b')

  def test_carry_onto_others_after_folding_the_fix_on_the_source(self):
    # The workflow the conflict message gives: fold the fix into the checked-
    # out branch first, then carry the (no longer reachable) fix --onto the
    # other branches only.
    self.run_tool('fork', '--all')
    signal, fix = self.commit_fixup()
    self.git('-c', 'sequence.editor=true', 'rebase', '-q', '-i',
             '--autosquash', f'upstream/{self.base(self.series)}')
    source = self.git('rev-parse', 'HEAD').strip()
    self.run_tool('carry', fix, '--onto=jax-0.11.2')
    self.assertEqual(self.git('rev-parse', self.series.name).strip(), source)
    self.run_tool('refresh', '--all')
    with open(os.path.join(self.patches, 'jax-0.11.2', signal.name),
              'rb') as f:
      self.assertIn(_CARRIED, f.read())

  def test_carry_and_refresh_all_bad_inputs(self):
    proc = self.run_tool('refresh', '--all', expect=2)
    self.assertIn('run `python -m jax_fork fork` first', proc.stderr)
    self.run_tool('fork')  # One series only.
    proc = self.run_tool('refresh', '--all', expect=2)
    self.assertIn('fork --all', proc.stderr)
    shutil.rmtree(os.path.join(self.fork, 'jax'))
    self.run_tool('fork', '--all')
    proc = self.run_tool('carry', 'no-such-commit', expect=2)
    self.assertIn('not a commit', proc.stderr)
    self.run_tool('carry', expect=2)
    proc = self.run_tool('carry', 'HEAD', '--onto=jax-9.9', expect=2)
    self.assertIn('No series branch jax-9.9', proc.stderr)


if __name__ == '__main__':
  absltest.main()
