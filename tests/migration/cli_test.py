"""End-to-end tests of ``python -m migration`` against a real jax install.

A venv is built once per module with the released jax wheel (``pip install
--no-deps``; the tool never imports jax, so jaxlib is not needed). Each test
restores the wheel's files, then runs the tool as a subprocess with the
venv's Python, ``PYTHONPATH=<repo root>``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile

from absl.testing import absltest
import filelock
import venv_util

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from migration import hunks  # noqa: E402
from migration import manifest as manifest_lib  # noqa: E402
from jax_fork import manifest_gen  # noqa: E402
from migration import transaction  # noqa: E402
from migration import wheels  # noqa: E402

VERSION = os.environ.get('JAX_INTERPRET_PATCHES_TEST_VERSION', '0.12.0.1')
PATCHES = os.path.join(REPO, 'patches')


class MigrationCliTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.manifest = manifest_lib.load(PATCHES)
    cls.series = cls.manifest.series_for(VERSION)
    assert cls.series is not None, f'{VERSION} not served'
    cls.files = list(cls.series.files)
    cls.wheel = wheels.pristine_wheel(VERSION)
    # None for a module the series adds.
    cls.pristine = venv_util.released_files(cls.wheel, cls.files)
    # A venv with pip (and without the `wheel` package), jax installed by it.
    cls.venv = venv = venv_util.make('migration-test-', cls.wheel,
                                     with_pip=True)
    cls.root, cls.python, cls.site = venv.root, venv.python, venv.site
    cls.state_dir, cls.deps = venv.state_dir, venv.deps

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root, ignore_errors=True)
    super().tearDownClass()

  def setUp(self):
    super().setUp()
    # Start every test from the released files, bytecode compiled.
    self.venv.restore(self.pristine)

  def path(self, relpath: str) -> str:
    return self.venv.path(relpath)

  def read(self, relpath: str) -> bytes | None:
    """The file's content; None if there is none."""
    try:
      with open(self.path(relpath), 'rb') as f:
        return f.read()
    except FileNotFoundError:
      return None

  def snapshot(self) -> dict[str, bytes | None]:
    return {f: self.read(f) for f in self.files}

  def reinstall(self) -> None:
    """What `pip install --force-reinstall jax` does to the target files:
    the released ones back, the modules a series added left as they are."""
    for f, data in self.pristine.items():
      if data is not None:
        with open(self.path(f), 'wb') as out:
          out.write(data)

  def run_tool(self, *args: str, env: dict[str, str] | None = None,
               expect: int | None = 0, python: str | None = None
               ) -> subprocess.CompletedProcess[str]:
    full_env = dict(os.environ)
    full_env['PYTHONPATH'] = os.pathsep.join([REPO, self.deps])
    full_env.pop('JAX_INTERPRET_PATCHES_DIR', None)
    full_env.pop('JAX_INTERPRET_PATCHES_STATE_DIR', None)
    full_env.pop(transaction.KILL_ENV, None)
    full_env.update(env or {})
    proc = subprocess.run([python or self.python, '-m', 'migration', *args],
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
      if self.pristine[f] is None:
        self.assertFalse(os.path.lexists(self.path(f)), f)
      else:
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
    self.assertIn('out of status, check, apply, revert, wheel; got',
                  proc.stderr)
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

  def test_apply_prints_its_result_and_the_table_only_if_verbose(self):
    for args in (('apply', '--dry-run'), ('apply',), ('revert',)):
      out = self.run_tool(*args).stdout
      # One sentence, then one line per file replaced (or to be replaced).
      self.assertEqual(len(out.splitlines()), 1 + len(self.files), out)
      self.assertNotIn('State:', out)
    out = self.run_tool('apply', '--verbose').stdout
    self.assertIn('Applied', out)
    self.assertIn('State:', out)
    self.assertIn(self.series.name, out)

  def test_help_and_errors_name_the_program_run(self):
    # A console script like pip's entry point for jax-interpret-patches.
    script = os.path.join(self.root, 'jax-interpret-patches')
    with open(script, 'w', encoding='utf-8') as f:
      f.write('from migration import cli\ncli.run()\n')
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, self.deps]))
    for prog, cmd in (('jax-interpret-patches', [self.python, script]),
                      ('python -m migration',
                       [self.python, '-m', 'migration'])):
      run = lambda *a, cmd=cmd: subprocess.run(  # noqa: E731
          [*cmd, *a], cwd=self.root, env=env, capture_output=True,
          text=True, check=False)
      proc = run('frobnicate')
      self.assertEqual(proc.returncode, 2, proc.stderr)
      self.assertIn(f'Run {prog} --help', proc.stderr)
      proc = run('status', '--no_such_flag')
      self.assertEqual(proc.returncode, 2, proc.stderr)
      self.assertIn(f'Run {prog} --help', proc.stderr)
      out = run('--help').stdout
      self.assertIn(f'Usage: {prog} COMMAND', out)
      if prog != 'python -m migration':
        self.assertNotIn('python -m migration', out)

  def test_apply_keeps_pristine_backup(self):
    self.run_tool('apply')
    backup = os.path.join(self.state_dir, 'backup', VERSION)
    for f in self.files:
      if self.pristine[f] is None:  # A module the series adds: no backup.
        self.assertFalse(os.path.lexists(os.path.join(backup, *f.split('/'))))
        continue
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
    nearest = self.manifest.nearest_served('0.6.0')
    self.assertIn(f'the nearest served release is {nearest}', proc.stderr)
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
    # Killed after replacing one file (of several), or, where the series
    # touches one file (jax 0.7.2), after committing to replace it.
    crash_after = min(1, len(self.files) - 1)
    crash = {'JAX_INTERPRET_PATCHES_TEST_CRASH_AFTER': str(crash_after)}
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

  # Issue #4: lost patches, per-patch states, --python, --dry_run, --force,
  # concurrent runs, upstream-merged patches (kill -9 at every step:
  # fault_test.py).

  def test_status_flags_patches_lost_after_reinstall(self):
    self.run_tool('apply')
    self.reinstall()
    data = self.status_json()
    self.assertEqual(data['state'], 'pristine')
    self.assertIn('jax reinstalled', data['patches_lost'])
    self.assertIn('Patches lost:', self.run_tool('status').stdout)
    self._edit_metadata_version('0.6.0')
    data = self.status_json()
    self.assertEqual(data['state'], 'unsupported')
    self.assertIn('reinstalled as 0.6.0', data['patches_lost'])

  def test_patches_lost_cleared_by_apply_or_revert(self):
    self.run_tool('apply')
    self.reinstall()
    # A module the series adds is left by the reinstall: revert removes it.
    leftover = [f for f, d in self.pristine.items() if d is None]
    out = self.run_tool('revert').stdout
    self.assertIn('Removed what an earlier apply left' if leftover
                  else 'Forgot', out)
    for f in leftover:
      self.assertIn(f'  removed {f}', out)
    self.assertPristine()
    self.assertIsNone(self.status_json()['patches_lost'])
    self.run_tool('apply')
    self.assertIsNone(self.status_json()['patches_lost'])

  def test_status_per_patch_states(self):
    names = [p.name for p in self.series.patches]
    states = [p['state'] for p in self.status_json()['patches']]
    self.assertEqual(states, ['not applied'] * len(names))
    self.run_tool('apply')
    states = [p['state'] for p in self.status_json()['patches']]
    self.assertEqual(states, ['applied'] * len(names))
    # A local edit outside every hunk (a line at the top; not at the end,
    # where a hunk that ends the file must stay at the end) of a file the
    # release ships (a module the series adds is one hunk): each patch is
    # still seen as applied.
    edited = [f for f in self.files if self.pristine[f] is not None][-1]
    data = self.read(edited)
    with open(self.path(edited), 'wb') as f:
      f.write(b'# local edit\n' + data)
    data = self.status_json()
    self.assertEqual(data['state'], 'locally modified')
    self.assertEqual([p['state'] for p in data['patches']],
                     ['applied'] * len(names))
    # From the released files, an edit of a line the first hunk of patch 1
    # expects: patch 1 conflicts.
    self.run_tool('apply', '--force')
    self.run_tool('revert')
    first = self.series.patches[0]
    with open(first.path, encoding='utf-8') as f:
      hunk = hunks.parse(f.read())[0]
    text = self.pristine[hunk.path].decode()
    line = max((x for x in hunk.expected if text.count(x) == 1), key=len)
    with open(self.path(hunk.path), 'w', encoding='utf-8') as f:
      f.write(text.replace(line, '# edited away', 1))
    data = self.status_json()
    self.assertEqual(data['patches'][0]['state'], 'conflicting')

  def test_status_never_imports_jax(self):
    # A jax that cannot be imported: status must not notice. (How fast it is
    # is measured in benchmarks/, not here.)
    init = os.path.join(self.site, 'jax', '__init__.py')
    with open(init, 'rb') as f:
      original = f.read()
    self.addCleanup(lambda: open(init, 'wb').write(original))
    with open(init, 'ab') as f:
      f.write(b'\nraise RuntimeError("jax was imported")\n')
    self.run_tool('status')
    self.run_tool('apply')
    self.run_tool('revert')

  def test_python_flag_targets_another_environment(self):
    # The tool runs in this test's Python; the target is the venv.
    target = f'--python={self.python}'
    data = json.loads(self.run_tool('status', '--json', target,
                                    python=sys.executable).stdout)
    self.assertEqual(data['environment']['site_packages'], self.site)
    self.assertEqual(data['environment']['jax'], VERSION)
    proc = self.run_tool('apply', target, '--dry-run', python=sys.executable)
    self.assertIn('Dry run', proc.stdout)
    self.assertPristine()
    self.assertFalse(os.path.exists(self.venv.state_root))
    self.run_tool('apply', target, python=sys.executable)
    self.assertEqual(self.status_json()['state'], 'patched')
    self.run_tool('revert', target, python=sys.executable)
    self.assertPristine()

  def test_python_flag_bad_inputs(self):
    proc = self.run_tool('status', '--python=/nonexistent/python', expect=2)
    self.assertIn('not an executable', proc.stderr)
    bare = os.path.join(self.root, 'bare')
    if not os.path.exists(bare):
      subprocess.run([sys.executable, '-m', 'venv', '--without-pip', bare],
                     check=True)
    bare_python = os.path.join(bare, 'bin', 'python')
    data = json.loads(self.run_tool('status', '--json',
                                    f'--python={bare_python}').stdout)
    self.assertEqual(data['state'], 'not installed')
    proc = self.run_tool('apply', f'--python={bare_python}', expect=3)
    self.assertIn('jax is not installed', proc.stderr)

  def test_missing_dependency_is_an_environment_error(self):
    # A Python without the tool's dependencies (here absl): exit code 5 and
    # the missing module named, not a traceback and exit code 1.
    bare = os.path.join(self.root, 'bare')
    if not os.path.exists(bare):
      subprocess.run([sys.executable, '-m', 'venv', '--without-pip', bare],
                     check=True)
    proc = subprocess.run(
        [os.path.join(bare, 'bin', 'python'), '-m', 'migration', 'status'],
        cwd=self.root, env=dict(os.environ, PYTHONPATH=REPO),
        capture_output=True, text=True, check=False)
    self.assertEqual(proc.returncode, 5, proc.stderr)
    self.assertIn('absl is not installed in', proc.stderr)
    self.assertNotIn('Traceback', proc.stderr)

  def test_dry_run_changes_nothing(self):
    proc = self.run_tool('apply', '--dry_run', '--json')
    data = json.loads(proc.stdout)
    self.assertTrue(data['dry_run'])
    self.assertFalse(data['changed'])
    self.assertEqual(sorted(data['files_changed']), sorted(self.files))
    self.assertPristine()
    self.assertFalse(os.path.exists(self.venv.state_root))
    self.run_tool('apply')
    patched = self.snapshot()
    self.run_tool('revert', '--dry-run')
    self.assertEqual(self.snapshot(), patched)

  def test_force_sets_modified_file_aside_and_revert_restores_it(self):
    target = self.files[-1]
    with open(self.path(target), 'ab') as f:
      f.write(b'# local edit\n')
    modified = self.snapshot()
    self.run_tool('apply', '--force', '--dry-run')
    self.assertEqual(self.snapshot(), modified)
    proc = self.run_tool('apply', '--force')
    self.assertIn('Set aside', proc.stdout)
    self.assertEqual(self.status_json()['state'], 'patched')
    proc = self.run_tool('revert')
    self.assertIn('Restored', proc.stdout)
    self.assertEqual(self.snapshot(), modified)  # Byte for byte.
    proc = self.run_tool('revert', '--force', expect=2)
    self.assertIn('only for apply', proc.stderr)

  def test_concurrent_applies_end_with_one_clean_result(self):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, self.deps]))
    procs = [subprocess.Popen(
        [self.python, '-m', 'migration', 'apply', '--json',
         '--lock_timeout=120'], cwd=self.root, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(4)]
    results = []
    for p in procs:
      out, err = p.communicate()
      self.assertEqual(p.returncode, 0, err)
      results.append(json.loads(out))
    self.assertEqual(sum(r['changed'] for r in results), 1)
    self.assertEqual(self.status_json()['state'], 'patched')
    self.run_tool('revert')
    self.assertPristine()

  def test_patch_already_upstream_is_skipped(self):
    # A release that already contains patch 1: the released wheel with
    # patch 1 applied (and its RECORD updated), served by a manifest
    # generated from it.
    first = self.series.patches[0]
    wheel_dir = os.path.join(self.root, 'upstream-wheels')
    os.makedirs(wheel_dir, exist_ok=True)
    fake = os.path.join(wheel_dir, os.path.basename(self.wheel))
    _wheel_with_patch(self.wheel, first.path, fake)
    patches = os.path.join(self.root, 'upstream-patches')
    shutil.rmtree(patches, ignore_errors=True)
    shutil.copytree(PATCHES, patches)
    manifest_gen.generate(patches, wheel_dirs=(wheel_dir,))
    loaded = manifest_lib.load(patches)
    self.assertEqual(loaded.series[self.series.name].upstream[VERSION],
                     (first.name,))
    # Install it as pip would (its files and RECORD), restored afterwards.
    record = os.path.join(self.site, f'jax-{VERSION}.dist-info', 'RECORD')
    with open(record, encoding='utf-8') as f:
      original = f.read()
    self.addCleanup(lambda: open(record, 'w', encoding='utf-8').write(
        original))
    with zipfile.ZipFile(fake) as zf:
      for f in self.files:
        if self.pristine[f] is None:  # A module the series adds.
          continue
        with open(self.path(f), 'wb') as out:
          out.write(zf.read(f))
      with open(record, 'w', encoding='utf-8') as out:
        out.write(zf.read(f'jax-{VERSION}.dist-info/RECORD').decode())
    released = self.snapshot()
    flag = f'--patches_dir={patches}'
    data = json.loads(self.run_tool('status', '--json', flag).stdout)
    self.assertEqual(data['state'], 'pristine')
    self.assertEqual(data['patches'][0]['state'], 'merged upstream')
    # The generated manifest's check reports patch 1 as already upstream;
    # the stock one refuses the wheel, which is not the released one.
    proc = self.run_tool('check', flag, f'--wheel_dir={wheel_dir}', expect=0)
    self.assertIn('already upstream', proc.stdout)
    proc = self.run_tool('check', f'--wheel_dir={wheel_dir}', expect=5)
    self.assertIn('is not the released wheel', proc.stderr)
    proc = self.run_tool('apply', flag, '--json')
    result = json.loads(proc.stdout)
    self.assertEqual(result['skipped_upstream'], [first.name])
    self.assertEqual(result['after']['state'], 'patched')
    self.run_tool('revert', flag)
    self.assertEqual(self.snapshot(), released)

  def test_install_patched_by_an_earlier_release_is_updated(self):
    # An earlier release of this project served VERSION with a series one of
    # whose patches added a comment line worded otherwise; jax was patched
    # with it. The manifest generated since from today's series keeps that
    # release's hashes (superseded): status says so, apply updates the files
    # to today's series, revert restores the released ones.
    patches = os.path.join(self.root, 'earlier-patches')
    shutil.rmtree(patches, ignore_errors=True)
    os.makedirs(patches)
    shutil.copy(os.path.join(PATCHES, manifest_lib.MANIFEST), patches)
    directory = os.path.join(patches, self.series.name)
    shutil.copytree(self.series.directory, directory)
    texts = []
    for p in self.series.patches:
      with open(p.path, encoding='utf-8') as f:
        texts.append(f.read())
    # The last comment line a patch adds that no later patch has as context.
    k, line = next(
        (k, x) for k in reversed(range(len(texts)))
        for x in texts[k].splitlines()
        if x.startswith('+') and x[1:].lstrip().startswith('# ')
        and not any(x[1:] in t for t in texts[k + 1:]))
    edited = os.path.join(directory, self.series.patches[k].name)
    with open(edited, 'w', encoding='utf-8') as f:
      f.write(texts[k].replace(line, line + ' (earlier wording)', 1))
    serve = {self.series.name: [VERSION]}
    manifest_gen.generate(patches, serve=serve)
    flag = f'--patches_dir={patches}'
    self.run_tool('apply', flag)
    earlier = self.snapshot()
    shutil.copy(self.series.patches[k].path, edited)
    manifest_gen.generate(patches, serve=serve)
    self.assertEqual(
        self.status_json()['state'], 'locally modified',
        'the stock manifest, generated before, does not know that release')
    data = json.loads(self.run_tool('status', '--json', flag).stdout)
    self.assertEqual(data['state'], 'patched by an earlier release')
    changed = [f['path'] for f in data['files']
               if f['state'] == 'patched by an earlier release']
    self.assertEqual(changed, [f for f in self.files
                               if b'(earlier wording)' in earlier[f]])
    result = json.loads(self.run_tool('apply', flag, '--json').stdout)
    self.assertEqual(result['after']['state'], 'patched')
    self.assertEqual(result['after']['applied'], len(self.series.patches))
    self.assertEqual(self.status_json()['state'], 'patched')
    self.assertNotEqual(self.snapshot(), earlier)
    # From the earlier release's files again, revert gives the released ones.
    for f, content in earlier.items():
      with open(self.path(f), 'wb') as out:
        out.write(content)
    self.run_tool('revert', flag)
    self.assertPristine()

  def test_series_that_adds_a_module(self):
    # A series whose last patch adds a module that jax does not ship: apply
    # creates it, revert removes it, and after a reinstall of jax, which
    # leaves it (pip removes only the files in RECORD), the install is
    # pristine but for it: apply and revert both work from there.
    module, content = venv_util.ADDED_MODULE
    patches = os.path.join(self.root, 'adding-patches')
    venv_util.series_adding_a_module(patches, self.series, VERSION)
    flag = f'--patches_dir={patches}'
    self.addCleanup(lambda: os.path.lexists(self.path(module))
                    and os.remove(self.path(module)))

    def status() -> dict:
      return json.loads(self.run_tool('status', '--json', flag).stdout)

    self.assertIn(f'  created {module}', self.run_tool('apply', flag).stdout)
    self.assertEqual(self.read(module), content)
    self.assertEqual(status()['state'], 'patched')
    self.assertIn(f'  removed {module}', self.run_tool('revert', flag).stdout)
    self.assertFalse(os.path.lexists(self.path(module)))
    self.assertPristine()
    self.assertEqual(status()['leftover'], [])

    self.run_tool('apply', flag)
    self.reinstall()
    data = status()
    self.assertEqual(data['state'], 'pristine')
    self.assertEqual(data['leftover'], sorted(
        [module, *(f for f, d in self.pristine.items() if d is None)]))
    self.assertIn('jax reinstalled', data['patches_lost'])
    self.assertIn(f'  would remove {module}',
                  self.run_tool('revert', '--dry-run', flag).stdout)
    self.assertEqual(self.read(module), content)
    self.assertIn(f'  removed {module}', self.run_tool('revert', flag).stdout)
    self.assertFalse(os.path.lexists(self.path(module)))
    self.assertPristine()
    self.assertEqual(status()['state'], 'pristine')

    self.run_tool('apply', flag)
    self.reinstall()
    result = json.loads(self.run_tool('apply', '--json', flag).stdout)
    self.assertEqual(result['after']['state'], 'patched')
    self.assertNotIn(module, result['files_changed'])  # Already right.
    self.assertEqual(self.read(module), content)
    self.run_tool('revert', flag)
    self.assertFalse(os.path.lexists(self.path(module)))
    self.assertPristine()

  def test_check_installed_version(self):
    data = json.loads(self.run_tool('check', '--json').stdout)
    self.assertTrue(data['ok'])
    (version,) = data['versions']
    self.assertEqual(version['version'], VERSION)
    self.assertEqual({p['result'] for p in version['patches']}, {'applies'})

  def test_wheel_needs_the_wheel_package(self):
    # The venv has no `wheel` package (only pip).
    proc = self.run_tool('wheel', '-o', os.path.join(self.root, 'out'),
                         expect=5)
    self.assertIn('pip install wheel', proc.stderr)


def _wheel_with_patch(wheel: str, patch: str, dest: str) -> None:
  """Writes a copy of ``wheel`` with ``patch`` applied and RECORD updated."""
  venv_util.rebuilt_wheel(wheel, dest, lambda tmp, names: subprocess.run(
      ['git', 'apply', '-p1', patch], cwd=tmp, check=True))


if __name__ == '__main__':
  absltest.main()
