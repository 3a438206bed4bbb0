"""End-to-end tests of ``python -m migration`` against a real jax install.

A venv is built once per module with the released jax wheel (``pip install
--no-deps``; the tool never imports jax, so jaxlib is not needed). Each test
restores the wheel's files, then runs the tool as a subprocess with the
venv's Python, ``PYTHONPATH=<repo root>``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

import absl
from absl.testing import absltest
import filelock

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from migration import manifest as manifest_lib  # noqa: E402
from migration import wheels  # noqa: E402

VERSION = os.environ.get('JAX_INTERPRET_PATCHES_TEST_VERSION', '0.12.0.1')
PATCHES = os.path.join(REPO, 'patches')
# Directories searched for the released wheel before the download cache.
WHEEL_DIRS = tuple(
    d for d in os.environ.get('JAX_INTERPRET_PATCHES_WHEEL_DIRS', '').split(
        os.pathsep) if d)


def _deps_dir(root: str) -> str:
  """A directory exposing only absl and filelock of the running Python."""
  deps = os.path.join(root, 'deps')
  os.makedirs(deps)
  for mod in (absl, filelock):
    src = os.path.dirname(mod.__file__)
    os.symlink(src, os.path.join(deps, os.path.basename(src)))
  return deps


class MigrationCliTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.manifest = manifest_lib.load(PATCHES)
    cls.series = cls.manifest.series_for(VERSION)
    assert cls.series is not None, f'{VERSION} not served'
    cls.files = list(cls.series.files)
    cls.wheel = wheels.pristine_wheel(VERSION, WHEEL_DIRS)
    with zipfile.ZipFile(cls.wheel) as zf:
      cls.pristine = {f: zf.read(f) for f in cls.files}
    cls.root = tempfile.mkdtemp(prefix='migration-test-')
    venv = os.path.join(cls.root, 'venv')
    subprocess.run([sys.executable, '-m', 'venv', venv], check=True)
    cls.python = os.path.join(venv, 'bin', 'python')
    subprocess.run([cls.python, '-m', 'pip', 'install', '-q', '--no-deps',
                    '--disable-pip-version-check', cls.wheel], check=True)
    cls.site = subprocess.run(
        [cls.python, '-c', 'import sysconfig; '
         'print(sysconfig.get_paths()["purelib"])'],
        check=True, capture_output=True, text=True).stdout.strip()
    cls.state_dir = os.path.join(os.path.dirname(cls.site),
                                 '.jax-interpret-patches')
    cls.deps = _deps_dir(cls.root)

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root, ignore_errors=True)
    super().tearDownClass()

  def setUp(self):
    super().setUp()
    # Start every test from the released files, bytecode compiled.
    for f, data in self.pristine.items():
      with open(self.path(f), 'wb') as out:
        out.write(data)
    with contextlib.suppress(FileNotFoundError):
      os.remove(os.path.join(self.state_dir, 'journal.json'))
    subprocess.run([self.python, '-m', 'compileall', '-q',
                    os.path.dirname(self.path(self.files[0]))], check=True)

  def path(self, relpath: str) -> str:
    return os.path.join(self.site, *relpath.split('/'))

  def read(self, relpath: str) -> bytes:
    with open(self.path(relpath), 'rb') as f:
      return f.read()

  def snapshot(self) -> dict[str, bytes]:
    return {f: self.read(f) for f in self.files}

  def run_tool(self, *args: str, env: dict[str, str] | None = None,
               expect: int | None = 0) -> subprocess.CompletedProcess[str]:
    full_env = dict(os.environ)
    full_env['PYTHONPATH'] = os.pathsep.join([REPO, self.deps])
    full_env.pop('JAX_INTERPRET_PATCHES_DIR', None)
    full_env.pop('JAX_INTERPRET_PATCHES_STATE_DIR', None)
    full_env.update(env or {})
    proc = subprocess.run([self.python, '-m', 'migration', *args],
                          cwd=self.root, env=full_env, capture_output=True,
                          text=True, check=False)
    if expect is not None:
      self.assertEqual(proc.returncode, expect,
                       f'stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}')
    return proc

  def status_json(self) -> dict:
    return json.loads(self.run_tool('status', '--json').stdout)

  def assertPristine(self):
    for f in self.files:
      self.assertEqual(self.read(f), self.pristine[f], f)

  def test_reader_that_goes_away_is_not_an_error(self):
    # `python -m migration apply | head -1`: the apply succeeds, and so must
    # the exit code, with no traceback.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, self.deps]))
    proc = subprocess.Popen(
        [self.python, '-m', 'migration', 'apply'], cwd=self.root, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()
    stderr = proc.stderr.read()
    proc.stderr.close()
    self.assertEqual(proc.wait(), 0, stderr)
    self.assertNotIn('Traceback', stderr)
    self.assertEqual(self.status_json()['state'], 'patched')

  def test_help_documents_exit_codes(self):
    out = self.run_tool('--help').stdout
    self.assertIn('Exit codes:', out)
    self.assertIn('--patches_dir', out)

  def test_usage_error(self):
    proc = self.run_tool('frobnicate', expect=2)
    self.assertIn('status, apply, revert', proc.stderr)
    self.run_tool('status', '--no_such_flag', expect=2)

  def test_status_pristine(self):
    out = self.run_tool('status').stdout
    self.assertIn('pristine', out)
    data = self.status_json()
    self.assertEqual(data['state'], 'pristine')
    self.assertEqual(data['environment']['jax'], VERSION)
    self.assertEqual(data['series'], self.series.name)
    self.assertEqual(data['applied'], 0)
    self.assertEqual({f['path'] for f in data['files']}, set(self.files))
    for f in data['files']:
      self.assertEqual(f['record_sha256'], f['sha256'])

  def test_apply_revert_roundtrip(self):
    proc = self.run_tool('apply')
    self.assertIn('Applied', proc.stdout)
    data = self.status_json()
    self.assertEqual(data['state'], 'patched')
    self.assertEqual(data['applied'], len(self.series.patches))
    for f in self.files:
      self.assertNotEqual(self.read(f), self.pristine[f], f)

    proc = self.run_tool('apply')
    self.assertIn('already patched', proc.stdout)

    proc = self.run_tool('revert', '--json')
    result = json.loads(proc.stdout)
    self.assertTrue(result['changed'])
    self.assertEqual(result['after']['state'], 'pristine')
    self.assertPristine()  # Byte-identical to the wheel's members.

    proc = self.run_tool('revert')
    self.assertIn('already pristine', proc.stdout)
    self.assertPristine()

  def test_apply_keeps_pristine_backup(self):
    self.run_tool('apply')
    backup = os.path.join(self.state_dir, 'backup', VERSION)
    for f in self.files:
      with open(os.path.join(backup, *f.split('/')), 'rb') as b:
        self.assertEqual(b.read(), self.pristine[f])

  def test_apply_clears_pycache_of_touched_modules_only(self):
    pycache = os.path.join(os.path.dirname(self.path(self.files[0])),
                           '__pycache__')
    before = set(os.listdir(pycache))
    touched = {os.path.splitext(os.path.basename(f))[0] for f in self.files}
    self.assertTrue(any(n.split('.')[0] in touched for n in before))
    self.run_tool('apply')
    after = set(os.listdir(pycache))
    self.assertEqual(after, {n for n in before
                             if n.split('.')[0] not in touched})

  def test_partly_patched(self):
    first = self.series.patches[0]
    subprocess.run(['git', 'apply', '-p1', first.path], cwd=self.site,
                   check=True)
    data = self.status_json()
    n = len(self.series.patches)
    if n > 1:
      self.assertEqual(data['state'], 'partly patched')
      self.assertEqual(data['applied'], 1)
    self.run_tool('apply')
    self.assertEqual(self.status_json()['state'], 'patched')
    subprocess.run(['git', 'apply', '-p1', '-R',
                    self.series.patches[-1].path], cwd=self.site, check=True)
    self.assertEqual(self.status_json()['applied'], n - 1)
    self.run_tool('revert')
    self.assertPristine()

  def test_locally_modified_is_refused(self):
    target = self.files[-1]
    with open(self.path(target), 'ab') as f:
      f.write(b'# local edit\n')
    before = self.snapshot()
    proc = self.run_tool('apply', expect=4)
    self.assertIn(target, proc.stderr)
    self.assertIn('nothing was changed', proc.stderr)
    self.assertEqual(self.snapshot(), before)
    self.assertEqual(self.status_json()['state'], 'locally modified')
    proc = self.run_tool('revert', '--json', expect=4)
    self.assertEqual(json.loads(proc.stdout)['error'], 'modified')
    self.assertEqual(self.snapshot(), before)

  def _edit_metadata_version(self, version: str):
    metadata = os.path.join(self.site, f'jax-{VERSION}.dist-info', 'METADATA')
    with open(metadata, encoding='utf-8') as f:
      original = f.read()
    self.addCleanup(lambda: open(metadata, 'w', encoding='utf-8').write(
        original))
    with open(metadata, 'w', encoding='utf-8') as f:
      f.write(original.replace(f'\nVersion: {VERSION}\n',
                               f'\nVersion: {version}\n', 1))

  def test_unsupported_version(self):
    self._edit_metadata_version('0.6.0')
    proc = self.run_tool('apply', expect=3)
    self.assertIn('jax 0.6.0 is not served', proc.stderr)
    for v in self.manifest.served_versions():
      self.assertIn(v, proc.stderr)
    self.assertEqual(self.status_json()['state'], 'unsupported')
    self.assertPristine()

  def test_jax_not_installed(self):
    dist_info = os.path.join(self.site, f'jax-{VERSION}.dist-info')
    os.rename(dist_info, dist_info + '.hidden')
    self.addCleanup(os.rename, dist_info + '.hidden', dist_info)
    proc = self.run_tool('apply', expect=3)
    self.assertIn('jax is not installed', proc.stderr)
    self.assertEqual(self.status_json()['state'], 'not installed')

  def test_corrupted_patch(self):
    patches = os.path.join(self.root, 'corrupt-patches')
    shutil.rmtree(patches, ignore_errors=True)
    shutil.copytree(PATCHES, patches)
    victim = os.path.join(patches, self.series.name,
                          self.series.patches[-1].name)
    with open(victim, 'r+b') as f:
      f.truncate(os.path.getsize(victim) // 2)
    proc = self.run_tool('apply', f'--patches_dir={patches}', expect=7)
    self.assertIn(self.series.patches[-1].name, proc.stderr)
    self.assertIn('corrupted', proc.stderr)
    self.assertPristine()
    proc = self.run_tool('apply', env={'JAX_INTERPRET_PATCHES_DIR': patches},
                         expect=7)
    self.assertPristine()

  def test_git_missing(self):
    env = {'PATH': os.path.join(self.root, 'empty-path')}
    proc = self.run_tool('apply', env=env, expect=5)
    self.assertIn('git is not installed', proc.stderr)
    self.assertPristine()
    # status does not need git.
    self.run_tool('status', env=env)

  def test_read_only_site_packages_immutable(self):
    directory = os.path.dirname(self.path(self.files[0]))
    if shutil.which('chattr') is None:
      self.skipTest('chattr not available')
    proc = subprocess.run(['chattr', '+i', directory], capture_output=True,
                          check=False)
    if proc.returncode != 0:
      self.skipTest(f'chattr +i failed: {proc.stderr!r}')
    self.addCleanup(subprocess.run, ['chattr', '-i', directory], check=True)
    proc = self.run_tool('apply', expect=5)
    self.assertIn('not writable', proc.stderr)
    self.assertPristine()
    self.assertFalse(os.path.exists(
        os.path.join(self.state_dir, 'journal.json')))

  def test_read_only_site_packages_mount(self):
    if os.geteuid() != 0:
      self.skipTest('needs root for a read-only bind mount')
    ok = subprocess.run(['mount', '--bind', '-o', 'ro', self.site, self.site],
                        capture_output=True, check=False)
    if ok.returncode != 0:
      self.skipTest(f'read-only bind mount failed: {ok.stderr!r}')
    self.addCleanup(subprocess.run, ['umount', self.site], check=True)
    proc = self.run_tool('apply', expect=5)
    self.assertIn('Read-only file system', proc.stderr)
    # Already pristine: revert is a no-op that writes nothing.
    self.run_tool('revert')
    self.assertPristine()

  def test_locked_by_another_run(self):
    os.makedirs(self.state_dir, exist_ok=True)
    with filelock.FileLock(os.path.join(self.state_dir, 'lock')):
      proc = self.run_tool('apply', expect=6)
      self.assertIn('lock', proc.stderr)
    self.assertPristine()

  def test_killed_run_is_recovered(self):
    crash = {'JAX_INTERPRET_PATCHES_TEST_CRASH_AFTER': '1'}
    self.run_tool('apply', env=crash, expect=86)
    status = self.status_json()
    self.assertTrue(status['interrupted'])
    if len(self.files) > 1:
      self.assertEqual(status['state'], 'mixed')
    self.run_tool('apply')
    self.assertEqual(self.status_json()['state'], 'patched')
    self.run_tool('revert', env=crash, expect=86)
    self.run_tool('revert')
    self.assertPristine()

  def test_json_error_output(self):
    self._edit_metadata_version('0.6.0')
    proc = self.run_tool('status', '--json')
    self.assertEqual(json.loads(proc.stdout)['state'], 'unsupported')
    proc = self.run_tool('apply', '--json', expect=3)
    data = json.loads(proc.stdout)
    self.assertEqual((data['ok'], data['exit_code'], data['error']),
                     (False, 3, 'unsupported'))


if __name__ == '__main__':
  absltest.main()
