"""Fault injection: apply and revert are all-or-nothing under every fault.

A site-packages with the released jax wheel (``pip install --target``) is
patched and reverted by ``python -m migration`` subprocesses while faults
are injected: SIGKILL at every write step, a file that cannot be replaced
(``chattr +i``, bind mounts), links planted at temporary and state paths,
``..`` in the manifest and the journal, a corrupt journal, a full disk, and
malformed inputs. Each test checks the exit code, that jax is pristine or
fully patched (hashes from jax's RECORD and from ``git apply`` of the series
on the wheel's files, computed here), that nothing the tool made is left
over, and that no file outside site-packages/jax and the state directory
changed.

The suite runs once, for the newest served release: faults do not depend
on the release. Tests that need root (mounts, ``chattr``) skip with the
reason where the machine does not allow them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

from absl.testing import absltest
import venv_util

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from migration import fsutil  # noqa: E402
from migration import manifest as manifest_lib  # noqa: E402
from migration import transaction  # noqa: E402
from migration import wheels  # noqa: E402

PATCHES = os.path.join(REPO, 'patches')
VERSION = os.environ.get('JAX_INTERPRET_PATCHES_TEST_VERSION', '0.12.0.1')


def _sha(data: bytes | None) -> str | None:
  return manifest_lib.sha256_bytes(data)


def _tree(root: str, skip: tuple[str, ...]) -> dict[str, tuple]:
  """Path -> (mode, size, mtime, inode, link target) of everything under
  ``root`` but ``skip`` (of a directory: its mode, as making the state
  directory changes its parent's mtime)."""
  out = {}
  for d, dirs, files in os.walk(root):
    dirs[:] = [x for x in dirs if os.path.join(d, x) not in skip]
    for name in dirs:
      out[os.path.join(d, name)] = (os.lstat(os.path.join(d, name)).st_mode,)
    for name in files:
      p = os.path.join(d, name)
      st = os.lstat(p)
      link = os.readlink(p) if os.path.islink(p) else None
      out[p] = (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ino, link)
  return out


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
  return subprocess.run(cmd, capture_output=True, text=True, check=False)


class FaultTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.manifest = manifest_lib.load(PATCHES)
    if VERSION != cls.manifest.served_versions()[-1]:
      raise absltest.SkipTest(
          'the fault suite runs once, for the newest served release')
    cls.series = cls.manifest.series_for(VERSION)
    # In the order apply replaces them (the manifest's, by path), so that
    # files[-1] is the last one replaced.
    cls.files = list(cls.series.hashes[VERSION])
    assert sorted(cls.files) == sorted(cls.series.files)
    cls.wheel = wheels.pristine_wheel(VERSION)
    # The target: a venv without pip, jax installed into its site-packages;
    # the tool runs with absl and filelock only.
    cls.venv = venv = venv_util.make('migration-fault-', cls.wheel,
                                     with_pip=False)
    cls.root, cls.python, cls.site = venv.root, venv.python, venv.site
    cls.state_dir, cls.deps = venv.state_dir, venv.deps
    cls.state_root = venv.state_root
    cls.jax_dir = os.path.join(cls.site, 'jax')
    # The expected ends, computed independently of the tool.
    ends = venv_util.expected_ends(
        venv, cls.wheel, VERSION, cls.files,
        [p.path for p in cls.series.to_apply(VERSION)])
    cls.pristine = ends.pristine
    cls.pristine_sha, cls.patched_sha = ends.pristine_sha, ends.patched_sha
    cls.tmp = os.path.join(cls.root, 'tmp')
    cls.home = os.path.join(cls.root, 'home')
    cls.decoy = os.path.join(cls.root, 'decoy')
    cls.wheel_dir = os.path.dirname(cls.wheel)

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root, ignore_errors=True)
    super().tearDownClass()

  def setUp(self):
    super().setUp()
    self.venv.restore(self.pristine)  # With bytecode, as an import leaves.
    for p in self.leftovers():  # Of a test that ends with a corrupt journal.
      if os.path.isdir(p) and not os.path.islink(p):
        shutil.rmtree(p)
      else:
        fsutil.remove(p)
    for d in (self.tmp, self.home, self.decoy):
      shutil.rmtree(d, ignore_errors=True)
      os.makedirs(d)
    with open(os.path.join(self.decoy, 'victim'), 'wb') as f:
      f.write(b'must not change\n')
    self.outside = self.snapshot_outside()

  def path(self, relpath: str) -> str:
    return self.venv.path(relpath)

  def snapshot_outside(self) -> dict[str, tuple]:
    """Everything under the test's root but site-packages/jax, the state
    directory and $TMPDIR."""
    return _tree(self.root, (self.jax_dir, self.state_root, self.tmp))

  def run_tool(self, *args: str, env: dict[str, str] | None = None,
               expect: int | None = 0) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items()
                if not k.startswith('JAX_INTERPRET_PATCHES_')}
    full_env.update(PYTHONPATH=os.pathsep.join([REPO, self.deps]),
                    PYTHONDONTWRITEBYTECODE='1', TMPDIR=self.tmp,
                    HOME=self.home, XDG_CACHE_HOME=os.path.join(self.home, 'c'),
                    JAX_INTERPRET_PATCHES_WHEEL_DIRS=self.wheel_dir)
    full_env.update(env or {})
    proc = subprocess.run([self.python, '-m', 'migration', *args],
                          cwd=self.root, env=full_env, capture_output=True,
                          text=True, check=False)
    if expect is not None:
      self.assertEqual(proc.returncode, expect,
                       f'{args}\nstdout:\n{proc.stdout}\nstderr:\n'
                       f'{proc.stderr}')
      if expect != 1:
        self.assertNotIn('Traceback', proc.stderr)
    return proc

  def hashes(self) -> dict[str, str | None]:
    out = {}
    for p in self.files:
      self.assertFalse(os.path.islink(self.path(p)), p)
      out[p] = manifest_lib.sha256_path(self.path(p))
    return out

  def assertEnd(self, end: str) -> None:
    """jax is at ``end`` (pristine or patched); nothing else changed."""
    want = self.pristine_sha if end == 'pristine' else self.patched_sha
    self.assertEqual(self.hashes(), want, end)
    self.assertOutsideUnchanged()

  def assertOutsideUnchanged(self) -> None:
    now = self.snapshot_outside()
    changed = sorted(p for p in {*now, *self.outside}
                     if now.get(p) != self.outside.get(p))
    self.assertEqual(changed, [], 'changed outside jax and the state dir')

  def assertAtAnEnd(self) -> str:
    got = self.hashes()
    self.assertIn(got, (self.pristine_sha, self.patched_sha))
    return 'pristine' if got == self.pristine_sha else 'patched'

  def leftovers(self) -> list[str]:
    """The tool's temporary files and journal, and $TMPDIR's contents."""
    out = []
    for top in (self.jax_dir, self.state_root):
      for d, _, files in os.walk(top):
        out += [os.path.join(d, f) for f in files
                if f.startswith(fsutil.TMP_PREFIX)]
    if os.path.exists(os.path.join(self.state_dir, 'journal.json')):
      out.append(os.path.join(self.state_dir, 'journal.json'))
    if os.path.isdir(self.tmp):
      out += [os.path.join(self.tmp, n) for n in os.listdir(self.tmp)]
    return out

  def assertClean(self) -> None:
    self.assertEqual(self.leftovers(), [])

  def kill(self, command: str, step: str, *args: str) -> None:
    proc = self.run_tool(command, *args, env={transaction.KILL_ENV: step},
                         expect=None)
    self.assertEqual(proc.returncode, -9, f'{step}: {proc.stderr}')

  # SIGKILL at every step.

  def test_kill_at_every_step(self):
    journal = os.path.join(self.state_dir, 'journal.json')
    for step in transaction.steps(len(self.files)):
      with self.subTest(step=step):
        # Right after the kill, jax is at one end, or a journal says how to
        # reach one. The next apply completes it; a revert undoes it.
        self.kill('apply', step)
        if not os.path.exists(journal):
          self.assertAtAnEnd()
        self.run_tool('apply')
        self.assertEnd('patched')
        self.assertClean()
        self.kill('revert', step)
        if not os.path.exists(journal):
          self.assertAtAnEnd()
        self.run_tool('revert')
        self.assertEnd('pristine')
        self.assertClean()
        self.kill('apply', step)
        self.run_tool('revert')
        self.assertEnd('pristine')
        self.assertClean()
    self.assertFalse(json.loads(
        self.run_tool('status', '--json').stdout)['interrupted'])

  def test_kill_at_every_step_with_a_module_the_series_adds(self):
    # A module the release does not ship is, at each end, absent (pristine)
    # or there with its content (patched), never a part of it.
    patches = tempfile.mkdtemp(prefix='adding-patches-')
    self.addCleanup(shutil.rmtree, patches, True)
    venv_util.series_adding_a_module(patches, self.series, VERSION)
    flag = f'--patches_dir={patches}'
    module, content = venv_util.ADDED_MODULE
    journal = os.path.join(self.state_dir, 'journal.json')

    def assert_end(end: str | None = None) -> None:
      end = end or self.assertAtAnEnd()
      self.assertEnd(end)
      if end == 'patched':
        with open(self.path(module), 'rb') as f:
          self.assertEqual(f.read(), content)
      else:
        self.assertFalse(os.path.lexists(self.path(module)))

    for step in transaction.steps(len(self.files) + 1):
      with self.subTest(step=step):
        for command in ('apply', 'revert'):
          self.kill(command, step, flag)
          if not os.path.exists(journal):
            assert_end()
          self.run_tool(command, flag)
          assert_end('patched' if command == 'apply' else 'pristine')
          self.assertClean()

  def test_recovered_revert_reports_success(self):
    # Issue 14 (4): apply --force over a modified file, revert killed
    # midway, revert again: it completes and says so (exit 0), and the
    # modified file is back.
    target = self.files[-1]
    with open(self.path(target), 'ab') as f:
      f.write(b'# local edit\n')
    modified = self.hashes()
    self.run_tool('apply', '--force')
    for i in range(1, len(self.files) + 1):
      with self.subTest(replaced=i):
        self.kill('revert', f'replaced-{i}')
        proc = self.run_tool('revert')
        self.assertIn('Completed an interrupted revert', proc.stdout)
        self.assertEqual(self.hashes(), modified)
        self.assertClean()
        self.run_tool('apply', '--force')

  def test_file_changed_since_the_kill(self):
    # Neither end can be reached without losing the edit: refused (4), the
    # journal kept, nothing changed.
    self.kill('apply', 'replaced-1')
    with open(self.path(self.files[-1]), 'ab') as f:
      f.write(b'# edited after the kill\n')
    before = self.hashes()
    for command in ('apply', 'revert'):
      proc = self.run_tool(command, expect=4)
      self.assertIn('changed since', proc.stderr)
    self.assertEqual(self.hashes(), before)
    self.assertTrue(os.path.exists(
        os.path.join(self.state_dir, 'journal.json')))

  # Files that cannot be replaced.

  def _chattr(self, flag: str, path: str) -> None:
    if shutil.which('chattr') is None:
      self.skipTest('chattr is not installed (e2fsprogs)')
    proc = _run(['chattr', flag, path])
    if proc.returncode:
      self.skipTest(f'chattr {flag} is not permitted here: {proc.stderr}')
    if flag == '+i':
      self.addCleanup(_run, ['chattr', '-i', path])

  def _bind(self, path: str, *options: str) -> None:
    proc = _run(['mount', '--bind', *options, path, path])
    if proc.returncode:
      self.skipTest(f'mount --bind is not permitted here: {proc.stderr}')
    self.addCleanup(_run, ['umount', '-l', path])
    if options:  # Older mounts need a remount to make a bind read-only.
      _run(['mount', '-o', 'remount,bind,ro', path])

  def test_immutable_file(self):
    last = self.path(self.files[-1])
    self._chattr('+i', last)
    proc = self.run_tool('apply', expect=5)
    self.assertIn(self.files[-1], proc.stderr)
    self.assertEnd('pristine')
    self.assertClean()
    _run(['chattr', '-i', last])
    self.run_tool('apply')
    self._chattr('+i', last)
    self.run_tool('revert', expect=5)
    self.assertEnd('patched')
    self.assertClean()

  def test_immutable_file_during_recovery(self):
    # Killed after replacing the first file; the last cannot be replaced
    # any more: the next run rolls back, then refuses.
    self.kill('apply', 'replaced-1')
    self._chattr('+i', self.path(self.files[-1]))
    self.run_tool('apply', expect=5)
    self.assertEnd('pristine')
    self.assertClean()

  def test_read_only_bind_mount_of_one_file(self):
    self._bind(self.path(self.files[-1]), '-o', 'ro')
    proc = self.run_tool('apply', expect=5)
    self.assertIn('Read-only file system', proc.stderr)
    self.assertEnd('pristine')
    self.assertClean()

  def test_rename_fails_midway_rolls_back(self):
    # A file that is a mount point opens for writing but cannot be renamed
    # over (EBUSY): the probe passes, the commit fails after replacing the
    # files before it and puts them back.
    self._bind(self.path(self.files[-1]))
    proc = self.run_tool('apply', expect=5)
    self.assertIn('put back', proc.stderr)
    self.assertEnd('pristine')
    self.assertClean()
    # Killed while putting them back: the next run finishes the rollback.
    if len(self.files) > 1:
      self.kill('apply', 'rolled-back-1')
      self.run_tool('apply', expect=5)
      self.assertEnd('pristine')
      self.assertClean()

  # Links planted where the tool writes.

  def test_links_at_temporary_and_state_paths(self):
    victim = os.path.join(self.decoy, 'victim')
    os.makedirs(os.path.join(self.state_dir, 'backup', VERSION))
    planted = [self.path(p) + '.jax-interpret-patches.tmp'
               for p in self.files]
    planted += [os.path.join(self.state_dir, n + '.tmp')
                for n in ('journal.json', 'applied.json')]
    planted += [os.path.join(self.state_dir, 'backup', VERSION, *p.split('/'))
                + '.tmp' for p in self.files]
    for p in planted:
      os.makedirs(os.path.dirname(p), exist_ok=True)
      os.symlink(victim, p)
    self.outside = self.snapshot_outside()
    self.run_tool('apply')
    self.assertEnd('patched')
    self.run_tool('revert')
    self.assertEnd('pristine')
    for p in planted:
      self.assertEqual(os.readlink(p), victim)

  def test_link_as_state_subdirectory(self):
    os.makedirs(self.state_dir)
    os.symlink(self.decoy, os.path.join(self.state_dir, 'backup'))
    self.run_tool('apply', expect=5)
    self.assertEnd('pristine')
    self.assertEqual(os.listdir(self.decoy), ['victim'])

  def test_link_or_directory_as_lock(self):
    os.makedirs(os.path.join(self.state_dir, 'lock'))
    self.run_tool('apply', expect=5)
    self.assertEnd('pristine')
    os.rmdir(os.path.join(self.state_dir, 'lock'))
    os.symlink(os.path.join(self.decoy, 'victim'),
               os.path.join(self.state_dir, 'lock'))
    self.run_tool('apply', expect=5)
    self.assertEnd('pristine')

  def test_link_as_target_directory(self):
    # The interpreter's folder replaced by a link out of site-packages/jax.
    folder = os.path.dirname(self.path(self.files[0]))
    moved = os.path.join(self.decoy, 'interpret')
    shutil.copytree(folder, moved, symlinks=True)
    self.addCleanup(lambda: (os.remove(folder), os.rename(moved, folder))
                    if os.path.islink(folder) else None)
    shutil.rmtree(folder)
    os.symlink(moved, folder)
    outside = self.snapshot_outside()
    self.run_tool('apply', expect=7)
    self.outside = outside
    self.assertOutsideUnchanged()

  # Untrusted paths.

  def _patches_copy(self, edit) -> str:
    """A copy of patches/ whose manifest ``edit`` changed (checksum kept
    valid, so the edit itself is what the tool must catch)."""
    patches = os.path.join(self.home, 'patches')
    shutil.copytree(PATCHES, patches)
    path = os.path.join(patches, manifest_lib.MANIFEST)
    with open(path, encoding='utf-8') as f:
      raw = json.load(f)
    edit(raw)
    raw['checksum'] = manifest_lib.checksum(raw)
    with open(path, 'w', encoding='utf-8') as f:
      json.dump(raw, f)
    self.outside = self.snapshot_outside()
    return patches

  def test_dotdot_in_manifest(self):
    evil = '../../../decoy/victim'
    for bad in (evil, 'jax/../../../decoy/victim', '/etc/passwd'):
      with self.subTest(path=bad):
        def edit(raw, bad=bad):
          s = raw['series'][self.series.name]
          s['patches'][0]['files'].append(bad)
          files = s['versions'][VERSION]['files']
          files[bad] = dict(files[self.files[0]])
        patches = self._patches_copy(edit)
        for command in ('status', 'apply'):
          proc = self.run_tool(command, f'--patches_dir={patches}', expect=7)
          self.assertIn('not a path inside', proc.stderr)
        self.assertEnd('pristine')
        shutil.rmtree(patches)

  def _plant_journal(self, entries: list[dict], phase='commit') -> None:
    os.makedirs(self.state_dir, exist_ok=True)
    with open(os.path.join(self.state_dir, 'journal.json'), 'w') as f:
      json.dump({'command': 'apply', 'phase': phase, 'files': entries,
                 'record': None}, f)
    self.outside = self.snapshot_outside()

  def test_dotdot_in_journal(self):
    victim = os.path.join(self.decoy, 'victim')
    with open(victim, 'rb') as f:
      victim_sha = _sha(f.read())
    good = self.files[0]
    for entry in (
        {'path': '../../../../decoy/victim', 'old': victim_sha, 'new': None,
         'old_tmp': fsutil.TMP_PREFIX + 'x', 'new_tmp': None},
        {'path': good, 'old': self.pristine_sha[good], 'new': victim_sha,
         'old_tmp': fsutil.TMP_PREFIX + 'x',
         'new_tmp': '../../../../../../decoy/victim'},
        {'path': good, 'old': self.pristine_sha[good], 'new': victim_sha,
         'old_tmp': fsutil.TMP_PREFIX + 'x', 'new_tmp': 'not-ours.tmp'}):
      with self.subTest(entry=entry):
        self._plant_journal([entry])
        self.run_tool('apply', expect=7)
        self.run_tool('revert', expect=7)
        self.assertEnd('pristine')

  def test_corrupt_journal(self):
    self.kill('apply', 'journal-commit')
    journal = os.path.join(self.state_dir, 'journal.json')
    with open(journal, 'rb') as f:
      data = f.read()
    for bad in (data[:len(data) // 2], b'[]', b'{"files": [{}]}', b''):
      with self.subTest(journal=bad[:20]):
        with open(journal, 'wb') as f:
          f.write(bad)
        self.outside = self.snapshot_outside()
        for command in ('apply', 'revert'):
          proc = self.run_tool(command, expect=7)
          self.assertIn('journal', proc.stderr)
        self.assertEnd('pristine')
        self.assertTrue(json.loads(self.run_tool(
            'status', '--json').stdout)['interrupted'])

  # A full disk.

  def _tmpfs(self, path: str, size: str) -> None:
    proc = _run(['mount', '-t', 'tmpfs', '-o', f'size={size}', 'tmpfs', path])
    if proc.returncode:
      self.skipTest(f'mount -t tmpfs is not permitted here: {proc.stderr}')
    self.addCleanup(_run, ['umount', '-l', path])

  def _fill(self, directory: str, leave: int) -> str:
    """Fills the file system of ``directory`` up to ``leave`` free bytes."""
    filler = os.path.join(directory, 'filler')
    free = os.statvfs(directory)
    with open(filler, 'wb') as f:
      f.write(b'\0' * max(0, free.f_bavail * free.f_frsize - leave))
    return filler

  def test_disk_full_in_site_packages(self):
    folder = os.path.dirname(self.path(self.files[0]))
    if any(os.path.dirname(self.path(p)) != folder for p in self.files):
      self.skipTest('the series touches more than one folder')
    saved = os.path.join(self.home, 'interpret')
    shutil.copytree(folder, saved)
    self._tmpfs(folder, '16m')
    shutil.copytree(saved, folder, dirs_exist_ok=True)
    self.outside = self.snapshot_outside()
    filler = self._fill(folder, 8192)
    proc = self.run_tool('apply', expect=5)
    self.assertIn('No space left', proc.stderr)
    self.assertEnd('pristine')
    self.assertClean()
    os.remove(filler)
    self.run_tool('apply')
    self.assertEnd('patched')
    filler = self._fill(folder, 8192)
    self.run_tool('revert', expect=5)
    self.assertEnd('patched')
    self.assertClean()
    os.remove(filler)

  def test_disk_full_in_state_directory(self):
    os.makedirs(self.state_dir)
    self._tmpfs(self.state_dir, '256k')
    os.chmod(self.state_dir, 0o700)  # A tmpfs is 1777: not private.
    self._fill(self.state_dir, 0)
    self.outside = self.snapshot_outside()
    proc = self.run_tool('apply', expect=5)
    self.assertIn('No space left', proc.stderr)
    self.assertEnd('pristine')
    self.assertClean()

  # Other bad inputs: each its documented exit code.

  def test_malformed_manifest(self):
    def drop(key):
      return lambda raw: raw.pop(key)

    def drop_files(raw):
      raw['series'][self.series.name]['versions'][VERSION].pop('files')

    def release_x(raw):
      raw['release'] = 'x'

    for name, edit in (('series', drop('series')), ('files', drop_files),
                       ('release', release_x)):
      with self.subTest(edit=name):
        patches = self._patches_copy(edit)
        for command in ('status', 'apply', 'revert'):
          self.run_tool(command, f'--patches_dir={patches}', expect=7)
        self.assertEnd('pristine')
        shutil.rmtree(patches)

  def test_edited_manifest_hash(self):
    # A wrong pristine hash, the checksum not regenerated: patch data (7).
    patches = os.path.join(self.home, 'patches')
    shutil.copytree(PATCHES, patches)
    path = os.path.join(patches, manifest_lib.MANIFEST)
    with open(path, encoding='utf-8') as f:
      raw = json.load(f)
    files = raw['series'][self.series.name]['versions'][VERSION]['files']
    files[self.files[0]]['pristine'] = '0' * 64
    with open(path, 'w', encoding='utf-8') as f:
      json.dump(raw, f)
    self.outside = self.snapshot_outside()
    proc = self.run_tool('apply', f'--patches_dir={patches}', expect=7)
    self.assertIn('checksum', proc.stderr)
    self.assertEnd('pristine')

  def _fake_python(self, output: str) -> str:
    path = os.path.join(self.home, 'fake-python')
    with open(path, 'w', encoding='utf-8') as f:
      f.write(f'#!/bin/sh\nprintf %s {json.dumps(output)!r}\n')
    os.chmod(path, 0o755)
    self.outside = self.snapshot_outside()
    return path

  def test_python_flag_with_a_bad_report(self):
    report = json.loads(subprocess.run(
        [self.python, '-c', 'import sys; sys.path.insert(0, sys.argv[1]); '
         'import json; from migration import targetenv; '
         'print(json.dumps(targetenv.probe()))', REPO],
        capture_output=True, text=True, check=True).stdout)
    no_dist_info = dict(report, site_packages=self.decoy)
    for output in ('{"python": "3.12"', '{"python": "3.12"}', '[]',
                   json.dumps(no_dist_info),
                   json.dumps(dict(report, record=None))):
      with self.subTest(output=output[:40]):
        fake = self._fake_python(output)
        for command in ('status', 'apply'):
          self.run_tool(command, f'--python={fake}', expect=5)
        self.assertEnd('pristine')

  def test_cache_not_writable(self):
    # apply --force with no backup and check --version need the released
    # wheel; the cache under HOME cannot be made: environment (5).
    with open(self.path(self.files[-1]), 'ab') as f:
      f.write(b'# local edit\n')
    modified = self.hashes()
    blocker = os.path.join(self.home, 'file')
    with open(blocker, 'w') as f:
      f.write('not a directory\n')
    self.outside = self.snapshot_outside()
    env = {'XDG_CACHE_HOME': os.path.join(blocker, 'cache'),
           'JAX_INTERPRET_PATCHES_WHEEL_DIRS': ''}
    proc = self.run_tool('apply', '--force', env=env, expect=5)
    self.assertIn('cache', proc.stderr)
    self.assertEqual(self.hashes(), modified)
    self.run_tool('check', f'--version={VERSION}', env=env, expect=5)
    self.assertOutsideUnchanged()

  def test_version_that_is_a_path(self):
    out = os.path.join(self.home, 'out')
    for command in ('wheel', 'check'):
      self.run_tool(command, '--version=../../x', '-o', out, expect=2)
    self.assertFalse(os.path.exists(out))
    self.assertEnd('pristine')


if __name__ == '__main__':
  absltest.main()
