"""Fault injection on the tool's state directory, records and journals.

Issue 23, items 1, 3, 4, 5 and 7: installs that share a state root (two
``pip install --target`` folders in one parent, one
``JAX_INTERPRET_PATCHES_STATE_DIR`` for two venvs) each keep their own
journal and record; a record of a replaced install does not bring back what
``apply --force`` set aside; the state directory is private whatever the
umask, and one another user owns or can write (or a link) is refused; corrupt
state files (JSON of the wrong shape, FIFOs, links to ``/dev/zero``, huge
files) get a documented exit code, without hanging; a full ``$TMPDIR`` gives
exit code 5 for apply and revert and 0 for status; and the state of a
previous release (files in the root) is adopted by its install.

Every tool run is a ``python -m migration`` subprocess of a venv's Python
with a timeout, so a hang fails the test. Expected hashes come from jax's
RECORD (pristine) and ``git apply`` of the series on the wheel's files
(patched), computed here. Tests needing root (``chown``, ``setpriv``,
``mount``) skip with the reason where the machine does not allow them.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import struct
import subprocess
import sys
import time
import zipfile

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
# Seconds a tool run may take before the test calls it a hang.
TIMEOUT_S = 60
# The user that plays "another user" (made with useradd if missing).
OTHER_USER = 'jip-state-other'


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess[str]:
  return subprocess.run(cmd, capture_output=True, text=True, check=False,
                        **kw)


def _replace_like_pip(site: str, old_wheel: str, new_wheel: str) -> None:
  """Replaces jax in ``site`` as pip does: removes the files the old
  wheel's RECORD lists (and its dist-info), then unpacks the new wheel."""
  with zipfile.ZipFile(old_wheel) as zf:
    names = zf.namelist()
  for name in names:
    path = os.path.join(site, *name.split('/'))
    if os.path.isfile(path):
      os.remove(path)
  for name in {n.split('/')[0] for n in names if '.dist-info/' in n}:
    shutil.rmtree(os.path.join(site, name), ignore_errors=True)
  with zipfile.ZipFile(new_wheel) as zf:
    zf.extractall(site)


class Install:
  """A jax install (``pip install --target``) and how to run the tool on it.

  Attributes:
    site: the folder jax was installed into (its site-packages).
    state_root: the default state root (beside ``site``).
    state_dir: the install's folder in it.
  """

  def __init__(self, test: StateFaultTest, site: str):
    self.test = test
    self.site = site
    self.state_root = os.path.join(os.path.dirname(site),
                                   '.jax-interpret-patches')
    self.state_dir = venv_util.install_state_dir(self.state_root, site)

  def path(self, relpath: str) -> str:
    return os.path.join(self.site, *relpath.split('/'))

  def reinstall(self) -> None:
    """``pip install --force-reinstall`` of the released wheel."""
    shutil.rmtree(self.site, ignore_errors=True)
    _run_ok = _run([sys.executable, '-m', 'pip', 'install', '-q', '--no-deps',
                    '--disable-pip-version-check', '--ignore-requires-python',
                    '--no-compile', '--force-reinstall', '--target',
                    self.site, self.test.wheel])
    self.test.assertEqual(_run_ok.returncode, 0, _run_ok.stderr)

  def hashes(self) -> dict[str, str | None]:
    return {p: manifest_lib.sha256_path(self.path(p))
            for p in self.test.files}

  def tool(self, *args: str, env: dict[str, str] | None = None,
           expect: int | None = 0, umask: int | None = None,
           user: tuple[int, int] | None = None,
           ) -> subprocess.CompletedProcess[str]:
    """Runs the tool on this install; checks its exit code (no traceback
    unless 1). ``user``: the uid and gid to run as, with the system Python
    (the venv's is under /root)."""
    t = self.test
    full_env = {k: v for k, v in os.environ.items()
                if not k.startswith('JAX_INTERPRET_PATCHES_')}
    full_env.update(
        PYTHONPATH=os.pathsep.join([REPO, t.venv.deps, self.site]),
        PYTHONDONTWRITEBYTECODE='1', TMPDIR=t.tmp, HOME=t.home,
        XDG_CACHE_HOME=os.path.join(t.home, 'c'),
        JAX_INTERPRET_PATCHES_WHEEL_DIRS=os.path.dirname(t.wheel))
    full_env.update(env or {})
    preexec = None if umask is None else (lambda: os.umask(umask))
    cmd = [t.venv.python, '-m', 'migration', *args]
    if user is not None:
      cmd = ['setpriv', f'--reuid={user[0]}', f'--regid={user[1]}',
             '--clear-groups', '/usr/bin/python3', *cmd[1:]]
    try:
      proc = subprocess.run(cmd,
                            cwd=t.root, env=full_env, capture_output=True,
                            text=True, check=False, timeout=TIMEOUT_S,
                            preexec_fn=preexec)
    except subprocess.TimeoutExpired:
      t.fail(f'{args} hung (over {TIMEOUT_S} s)')
    if expect is not None:
      t.assertEqual(proc.returncode, expect,
                    f'{args}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}')
      if expect != 1:
        t.assertNotIn('Traceback', proc.stderr)
    return proc

  def kill(self, command: str, step: str) -> None:
    proc = self.tool(command, env={transaction.KILL_ENV: step}, expect=None)
    self.test.assertEqual(proc.returncode, -9, f'{step}: {proc.stderr}')

  def status(self) -> dict:
    return json.loads(self.tool('status', '--json').stdout)


class StateFaultTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.manifest = manifest_lib.load(PATCHES)
    if VERSION != cls.manifest.served_versions()[-1]:
      raise absltest.SkipTest(
          'the fault suite runs once, for the newest served release')
    series = cls.manifest.series_for(VERSION)
    cls.files = list(series.files)
    cls.wheel = wheels.pristine_wheel(VERSION)
    # A Python to run the tool with; jax goes into --target folders.
    cls.venv = venv_util.make('migration-state-', cls.wheel, with_pip=False)
    cls.root = cls.venv.root
    # The expected ends, computed independently of the tool.
    ends = venv_util.expected_ends(
        cls.venv, cls.wheel, VERSION, cls.files,
        [p.path for p in series.to_apply(VERSION)])
    cls.pristine = ends.pristine
    cls.pristine_sha, cls.patched_sha = ends.pristine_sha, ends.patched_sha
    cls.tmp = os.path.join(cls.root, 'tmp')
    cls.home = os.path.join(cls.root, 'home')
    # The two installs, in one parent; made once, restored per test.
    cls.parent = os.path.join(cls.root, 'targets')
    cls.a = cls.b = None

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root, ignore_errors=True)
    super().tearDownClass()

  def setUp(self):
    super().setUp()
    for d in (self.tmp, self.home):
      shutil.rmtree(d, ignore_errors=True)
      os.makedirs(d)
    if StateFaultTest.a is None:
      os.makedirs(self.parent)
      for name in ('a', 'b'):
        inst = Install(self, os.path.join(self.parent, name))
        inst.reinstall()
        setattr(StateFaultTest, name, inst)
    if os.path.islink(self.a.state_root):
      os.remove(self.a.state_root)
    shutil.rmtree(self.a.state_root, ignore_errors=True)
    for inst in (self.a, self.b):
      inst.test = self
      for p, data in self.pristine.items():
        fsutil.remove(inst.path(p))
        if data is None:  # A module the series adds.
          continue
        with open(inst.path(p), 'wb') as f:
          f.write(data)
      for d in {os.path.dirname(inst.path(p)) for p in self.files}:
        for name in os.listdir(d):
          if name.startswith(fsutil.TMP_PREFIX):
            os.remove(os.path.join(d, name))

  def assertEnd(self, inst: Install, end: str) -> None:
    want = self.pristine_sha if end == 'pristine' else self.patched_sha
    self.assertEqual(inst.hashes(), want, f'{inst.site} not {end}')

  def _other_user(self) -> tuple[int, int]:
    """The uid and gid of a user other than root (made if missing)."""
    if os.geteuid() != 0:
      self.skipTest('needs root to act as another user')
    import pwd  # pylint: disable=g-import-not-at-top
    try:
      pw = pwd.getpwnam(OTHER_USER)
    except KeyError:
      # Bazel's test PATH has no sbin folders.
      useradd = shutil.which('useradd', path=os.pathsep.join(
          [os.environ.get('PATH', os.defpath), '/usr/sbin', '/sbin']))
      if useradd is None:
        self.skipTest('no useradd to make another user')
      _run([useradd, '--no-create-home', '--shell', '/usr/sbin/nologin',
            OTHER_USER])
    try:
      pw = pwd.getpwnam(OTHER_USER)
    except KeyError:
      self.skipTest(f'cannot make the user {OTHER_USER} here')
    # A sandbox's user namespace (Bazel's linux-sandbox) may map root alone:
    # chown to any other uid is then EINVAL.
    probe = os.path.join(self.root, 'chown-probe')
    with open(probe, 'w'):
      pass
    try:
      os.chown(probe, pw.pw_uid, pw.pw_gid)
    except OSError as e:
      self.skipTest(f'cannot give a file to {OTHER_USER} here: {e}')
    finally:
      os.remove(probe)
    return pw.pw_uid, pw.pw_gid

  # Item 1: every install its own journal and record.

  def test_installs_sharing_a_root_keep_their_own_journal(self):
    for shared in (None, os.path.join(self.root, 'shared-state')):
      with self.subTest(state_dir_env=shared):
        self.setUp()
        env = {'JAX_INTERPRET_PATCHES_STATE_DIR': shared} if shared else {}
        # Kill A's apply after its first replace: A is mixed, with a
        # journal; then B is patched and reverted.
        proc = self.a.tool('apply', env={**env,
                                         transaction.KILL_ENV: 'replaced-1'},
                           expect=None)
        self.assertEqual(proc.returncode, -9, proc.stderr)
        mixed = self.a.hashes()
        self.assertNotIn(mixed, (self.pristine_sha, self.patched_sha))
        self.b.tool('apply', env=env)
        self.assertEnd(self.b, 'patched')
        self.assertEqual(self.a.hashes(), mixed)  # B left A's run alone.
        self.assertTrue(json.loads(self.a.tool(
            'status', '--json', env=env).stdout)['interrupted'])
        self.assertFalse(json.loads(self.b.tool(
            'status', '--json', env=env).stdout)['interrupted'])
        self.b.tool('revert', env=env)
        self.assertEnd(self.b, 'pristine')
        # A's next run completes A's apply from A's journal.
        self.a.tool('apply', env=env)
        self.assertEnd(self.a, 'patched')
        self.assertEnd(self.b, 'pristine')
        self.a.tool('revert', env=env)
        self.assertEnd(self.a, 'pristine')
        if shared:
          shutil.rmtree(shared)

  def test_displaced_file_stays_with_its_install(self):
    # apply --force in A sets A's edit aside; B's revert never restores it.
    edited = self.files[0]
    with open(self.a.path(edited), 'ab') as f:
      f.write(b'# local edit of A\n')
    self.a.tool('apply', '--force')
    self.b.tool('apply')
    self.b.tool('revert')
    self.assertEnd(self.b, 'pristine')
    self.a.tool('revert')
    with open(self.a.path(edited), 'rb') as f:
      self.assertTrue(f.read().endswith(b'# local edit of A\n'))

  # Item 3: a replaced install does not get its displaced files back.

  def test_reinstall_drops_the_displaced_files(self):
    edited = self.files[0]
    with open(self.a.path(edited), 'ab') as f:
      f.write(b'# stale local edit\n')
    self.a.tool('apply', '--force')
    self.assertEnd(self.a, 'patched')
    self.a.reinstall()  # pip install --force-reinstall: the edit is gone.
    self.assertEnd(self.a, 'pristine')
    self.a.tool('apply')
    self.assertEnd(self.a, 'patched')
    self.a.tool('revert')
    self.assertEnd(self.a, 'pristine')

  # Item 4: private, and refused when another user can write it.

  def test_state_is_private_whatever_the_umask(self):
    edited = self.files[0]
    with open(self.a.path(edited), 'ab') as f:
      f.write(b'# edit\n')
    self.a.tool('apply', '--force', umask=0)
    self.assertEnd(self.a, 'patched')
    modes = {}
    for d, dirs, files in os.walk(self.a.state_root):
      for name in dirs + files:
        p = os.path.join(d, name)
        modes[os.path.relpath(p, self.a.state_root)] = stat.S_IMODE(
            os.lstat(p).st_mode)
    modes['.'] = stat.S_IMODE(os.lstat(self.a.state_root).st_mode)
    key = os.path.basename(self.a.state_dir)
    for name in ('.', key, f'{key}/backup', f'{key}/lock',
                 f'{key}/applied.json'):
      self.assertIn(name, modes)
    for name, mode in modes.items():
      self.assertEqual(mode & 0o077, 0, f'{name}: mode {mode:o}')

  def test_other_user_cannot_plant_a_displaced_file(self):
    # The attack of issue 23 (4): after root's apply under umask 000, another
    # user plants a record and a "displaced" file for root's revert.
    uid, gid = self._other_user()
    self.a.tool('apply', umask=0)
    key = self.files[0]
    evil = b'import os  # injected\n'
    series = self.manifest.series_for(VERSION)
    record = {'series': series.name, 'release': self.manifest.release,
              'jax_version': VERSION, 'dist_version': VERSION,
              'patches': [p.name for p in series.patches],
              'skipped_upstream': [],
              'displaced': {key: manifest_lib.sha256_bytes(evil)},
              'time': '2026-01-01T00:00:00+00:00'}
    # Into the folder the previous release used (the root) and this one's.
    script = (
        'import json, os, sys\n'
        'key, evil, version, record = sys.argv[1:5]\n'
        'for sdir in sys.argv[5:]:\n'
        '  try:\n'
        '    d = os.path.join(sdir, "backup", version, "displaced",'
        ' *key.split("/")[:-1])\n'
        '    os.makedirs(d, exist_ok=True)\n'
        '    open(os.path.join(d, key.split("/")[-1]), "w").write(evil)\n'
        '    rec = os.path.join(sdir, "applied.json")\n'
        '    if os.path.exists(rec): os.remove(rec)\n'
        '    open(rec, "w").write(record)\n'
        '    print("planted", sdir)\n'
        '  except OSError as e:\n'
        '    print(e, file=sys.stderr)\n')
    # The other user may reach the state root (not the test's private
    # temporary folder), and runs a system Python (not one under /root).
    os.chmod(self.root, 0o711)
    self.addCleanup(os.chmod, self.root, 0o700)
    python = '/usr/bin/python3'
    if not os.path.exists(python):
      self.skipTest(f'no {python} for another user to run')
    proc = _run(['setpriv', f'--reuid={uid}', f'--regid={gid}',
                 '--clear-groups', python, '-c', script,
                 key, evil.decode(), VERSION, json.dumps(record),
                 self.a.state_root, self.a.state_dir])
    self.assertEqual(proc.returncode, 0, proc.stderr)  # It ran.
    planted = 'planted' in proc.stdout
    self.a.tool('revert', expect=5 if planted else 0)
    with open(self.a.path(key), 'rb') as f:
      self.assertNotEqual(f.read(), evil)
    self.assertFalse(planted, 'another user could write the state directory')
    self.assertEnd(self.a, 'pristine')

  def test_unsafe_state_directory_is_refused(self):
    uid, gid = self._other_user()
    decoy = os.path.join(self.root, 'decoy-state')
    shutil.rmtree(decoy, ignore_errors=True)
    cases = {
        'root owned by another user': lambda r, s: os.chown(r, uid, gid),
        'root writable by all': lambda r, s: os.chmod(r, 0o777),
        'root writable by its group': lambda r, s: (
            os.chown(r, 0, gid), os.chmod(r, 0o775)),
        'install folder of another user': lambda r, s: os.chown(s, uid, gid),
        'install folder writable by all': lambda r, s: os.chmod(s, 0o757),
        'record of another user': lambda r, s: os.chown(
            os.path.join(s, 'applied.json'), uid, gid),
        'record writable by all': lambda r, s: os.chmod(
            os.path.join(s, 'applied.json'), 0o666),
        'lock of another user': lambda r, s: os.chown(
            os.path.join(s, 'lock'), uid, gid),
        'root a symbolic link': lambda r, s: (
            shutil.copytree(r, decoy, symlinks=True), shutil.rmtree(r),
            os.symlink(decoy, r)),
    }
    for name, spoil in cases.items():
      with self.subTest(case=name):
        self.setUp()
        shutil.rmtree(decoy, ignore_errors=True)
        self.a.tool('apply')
        spoil(self.a.state_root, self.a.state_dir)
        for command in ('revert', 'apply'):
          proc = self.a.tool(command, expect=5)
          self.assertIn('state path', proc.stderr)
          self.assertEnd(self.a, 'patched')
        data = self.a.status()
        self.assertIn('exit 5', data['state_problem'])
        if os.path.islink(self.a.state_root):
          os.remove(self.a.state_root)
        shutil.rmtree(decoy, ignore_errors=True)

  # Issue 42: the privilege model (migration/trust.py). Root never changes
  # another user's install; the owner does it.

  def _chown_tree(self, top: str, owner: tuple[int, int]) -> None:
    os.lchown(top, *owner)
    for d, dirs, files in os.walk(top):
      for n in dirs + files:
        os.lchown(os.path.join(d, n), *owner)

  def _owners(self) -> dict[str, tuple[int, int, int]]:
    """Owner, group and mode of everything under the test's root."""
    out = {}
    for d, dirs, files in os.walk(self.root):
      for n in dirs + files:
        p = os.path.join(d, n)
        st = os.lstat(p)
        out[p] = (st.st_uid, st.st_gid, st.st_mode)
    return out

  def test_root_refuses_a_users_install_and_the_user_patches_it(self):
    uid, gid = self._other_user()
    if not os.path.exists('/usr/bin/python3'):
      self.skipTest('no /usr/bin/python3 for another user to run')
    self._chown_tree(self.a.site, (uid, gid))
    self.addCleanup(self._chown_tree, self.a.site, (0, 0))
    os.chmod(self.root, 0o711)
    self.addCleanup(os.chmod, self.root, 0o700)
    for d in (self.tmp, self.home):
      os.chown(d, uid, gid)
    victim = os.path.join(self.root, 'root-only')
    with open(victim, 'w') as f:
      f.write('secret')
    os.chmod(victim, 0o600)
    for command, end in (('apply', 'pristine'), ('revert', 'patched')):
      with self.subTest(command=command):
        before = self._owners()
        proc = self.a.tool(command, expect=5)
        self.assertIn(f'belongs to {OTHER_USER}', proc.stderr)
        self.assertIn(f'sudo -u {OTHER_USER} ', proc.stderr)
        self.assertEnd(self.a, end)
        # Nothing made, removed or given away: the state folder too.
        self.assertEqual(self._owners(), before)
        # The owner does it.
        self.a.tool(command, user=(uid, gid))
        self.assertEnd(self.a, 'patched' if command == 'apply'
                       else 'pristine')
    self.assertEqual(os.lstat(victim).st_uid, 0)

  def test_folder_another_user_controls_is_refused(self):
    # Root's own jax in a folder another user owns or anyone can write:
    # they could swap a folder for a link between a check and a write.
    uid, gid = self._other_user()
    cases = {
        'site-packages of another user': lambda: os.chown(
            self.a.site, uid, gid),
        'site-packages writable by all': lambda: os.chmod(
            self.a.site, 0o777),
        'interpret folder writable by all': lambda: os.chmod(
            os.path.dirname(self.a.path(self.files[-1])), 0o777),
    }
    for name, spoil in cases.items():
      with self.subTest(case=name):
        modes = self._owners()
        spoil()
        try:
          proc = self.a.tool('apply', expect=5)
          self.assertIn('does not write in', proc.stderr)
          self.assertEnd(self.a, 'pristine')
          self.assertFalse(os.path.lexists(self.a.state_root))
        finally:
          for p in (self.a.site,
                    os.path.dirname(self.a.path(self.files[-1]))):
            uid0, gid0, mode0 = modes[p]
            os.lchown(p, uid0, gid0)
            os.chmod(p, stat.S_IMODE(mode0))
    self.a.tool('apply')
    self.assertEnd(self.a, 'patched')

  def test_pycache_link_is_refused(self):
    # A __pycache__ that is a link would lead the removal of stale
    # bytecode (and the probe files) into another folder.
    decoy = os.path.join(self.root, 'decoy-pycache')
    os.makedirs(decoy)
    self.addCleanup(shutil.rmtree, decoy, ignore_errors=True)
    stems = {os.path.splitext(os.path.basename(p))[0] for p in self.files}
    for stem in stems:
      for name in (f'{stem}.cpython-312.pyc', f'{stem}.keep'):
        with open(os.path.join(decoy, name), 'w') as f:
          f.write('x')
    want = sorted(os.listdir(decoy))
    cache = os.path.join(os.path.dirname(self.a.path(self.files[-1])),
                         '__pycache__')
    shutil.rmtree(cache, ignore_errors=True)
    os.symlink(decoy, cache)
    self.addCleanup(os.remove, cache)
    for command in ('apply', 'revert'):
      proc = self.a.tool(command, expect=5 if command == 'apply' else 0)
      if command == 'apply':
        self.assertIn('symbolic link', proc.stderr)
      self.assertEqual(sorted(os.listdir(decoy)), want)
      self.assertEnd(self.a, 'pristine')

  def test_folder_another_user_can_write_by_an_acl_is_refused(self):
    uid, _ = self._other_user()
    folder = os.path.dirname(self.a.path(self.files[-1]))
    mode = stat.S_IMODE(os.lstat(folder).st_mode)
    # user::rwx user:UID:rwx group::r-x mask::rwx other::r-x, as setfacl
    # -m u:UID:rwx writes it.
    entry = struct.Struct('<HHI')
    acl = struct.pack('<I', 2) + b''.join(entry.pack(*e) for e in (
        (0x01, 7, 0xFFFFFFFF), (0x02, 7, uid), (0x04, 5, 0xFFFFFFFF),
        (0x10, 7, 0xFFFFFFFF), (0x20, 5, 0xFFFFFFFF)))
    try:
      os.setxattr(folder, 'system.posix_acl_access', acl)
    except OSError as e:
      self.skipTest(f'no POSIX ACLs here: {e}')

    def drop_acl():
      os.removexattr(folder, 'system.posix_acl_access')
      os.chmod(folder, mode)
    self.addCleanup(drop_acl)
    proc = self.a.tool('apply', expect=5)
    self.assertIn(f'writable by user {OTHER_USER} (an ACL)', proc.stderr)
    self.assertEnd(self.a, 'pristine')
    self.assertFalse(os.path.lexists(self.a.state_root))

  def test_link_on_the_way_is_resolved_once(self):
    # Root reaches A through a link in a folder another user owns; the
    # user points it at a tree of their own after the run's checks. The
    # run keeps writing to A, where the link led when it started.
    uid, gid = self._other_user()
    att = os.path.join(self.root, 'att')
    os.makedirs(att)
    self.addCleanup(shutil.rmtree, att, ignore_errors=True)
    fake = os.path.join(att, 'fake')
    shutil.copytree(self.a.site, fake, symlinks=True)
    self._chown_tree(att, (uid, gid))
    link = os.path.join(att, 'v')
    os.symlink(self.a.site, link)
    run = self._stopped_run('apply', 'staged', env={
        'PYTHONPATH': os.pathsep.join([REPO, self.venv.deps, link])})
    os.remove(link)
    os.symlink(fake, link)
    code, err = self._resume(run)
    self.assertEqual(code, 0, err)
    self.assertEnd(self.a, 'patched')
    self.assertEnd(Install(self, fake), 'pristine')
    self.assertFalse(os.path.lexists(
        os.path.join(att, '.jax-interpret-patches')))
    self.a.tool('revert')
    self.assertEnd(self.a, 'pristine')

  def test_link_on_the_way_to_the_state_root_is_resolved_once(self):
    # JAX_INTERPRET_PATCHES_STATE_DIR reaches root's state root through a
    # link another user owns, which they point elsewhere after the checks.
    uid, gid = self._other_user()
    att = os.path.join(self.root, 'att')
    real_root = os.path.join(self.root, 'root-state-parent')
    evil = os.path.join(att, 'evil')
    victim = os.path.join(self.root, 'root-only')
    for d in (real_root, victim):
      os.makedirs(d)
      self.addCleanup(shutil.rmtree, d, ignore_errors=True)
    os.chmod(victim, 0o700)
    self.addCleanup(shutil.rmtree, att, ignore_errors=True)
    os.makedirs(os.path.join(evil, 'st'))
    key = os.path.basename(self.a.state_dir)
    os.symlink(victim, os.path.join(evil, 'st', key))
    link = os.path.join(att, 'lnk')
    os.symlink(real_root, link)
    self._chown_tree(att, (uid, gid))
    run = self._stopped_run('apply', 'recovered', env={
        'JAX_INTERPRET_PATCHES_STATE_DIR': os.path.join(link, 'st')})
    os.remove(link)
    os.symlink(evil, link)
    code, err = self._resume(run)
    self.assertEqual(code, 0, err)
    self.assertEnd(self.a, 'patched')
    self.assertEqual(os.listdir(victim), [])
    self.assertTrue(os.path.isfile(os.path.join(real_root, 'st', key,
                                                'applied.json')))
    self.a.tool('revert', env={'JAX_INTERPRET_PATCHES_STATE_DIR':
                               os.path.join(real_root, 'st')})
    self.assertEnd(self.a, 'pristine')

  def test_python_is_run_by_the_path_that_was_checked(self):
    # Named through a link in a folder another user owns, it runs from its
    # folder resolved when it was checked: a link swapped in between does
    # not change what runs.
    uid, gid = self._other_user()
    att = os.path.join(self.root, 'att')
    os.makedirs(att)
    self.addCleanup(shutil.rmtree, att, ignore_errors=True)
    venv_dir = os.path.dirname(os.path.dirname(self.venv.python))
    os.symlink(venv_dir, os.path.join(att, 'v'))
    self._chown_tree(att, (uid, gid))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO,
                                                       self.venv.deps]))
    proc = _run([sys.executable, '-m', 'migration', 'status', '--json',
                 f'--python={os.path.join(att, "v", "bin", "python")}'],
                env=env, cwd=self.root, timeout=TIMEOUT_S)
    self.assertEqual(proc.returncode, 0, proc.stderr)
    self.assertEqual(
        json.loads(proc.stdout)['environment']['python_executable'],
        os.path.join(os.path.realpath(venv_dir), 'bin', 'python'))

  def test_python_whose_home_another_user_can_change_is_not_run(self):
    # A venv's pyvenv.cfg names its base Python's folder (`home`), whose
    # standard library it loads.
    uid, gid = self._other_user()
    fake = os.path.join(self.root, 'att', 'base', 'bin')
    os.makedirs(fake)
    self.addCleanup(shutil.rmtree, os.path.join(self.root, 'att'),
                    ignore_errors=True)
    self._chown_tree(os.path.join(self.root, 'att'), (uid, gid))
    cfg = os.path.join(os.path.dirname(os.path.dirname(self.venv.python)),
                       'pyvenv.cfg')
    with open(cfg, encoding='utf-8') as f:
      original = f.read()
    self.addCleanup(lambda: open(cfg, 'w', encoding='utf-8').write(original))
    with open(cfg, 'w', encoding='utf-8') as f:
      f.write(''.join(f'home = {fake}\n' if line.startswith('home')
                      else line for line in original.splitlines(True)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO,
                                                       self.venv.deps]))
    proc = _run([sys.executable, '-m', 'migration', 'status',
                 f'--python={self.venv.python}'], env=env, cwd=self.root,
                timeout=TIMEOUT_S)
    self.assertEqual(proc.returncode, 5, proc.stderr)
    self.assertIn(f'belongs to {OTHER_USER}', proc.stderr)
    self.assertIn('Nothing was run', proc.stderr)

  def test_wheel_cache_another_user_can_change_is_not_used(self):
    uid, gid = self._other_user()
    att = os.path.join(self.root, 'att')
    os.makedirs(att)
    self.addCleanup(shutil.rmtree, att, ignore_errors=True)
    os.chown(att, uid, gid)
    cache = os.path.join(att, 'cache')
    env = {k: v for k, v in os.environ.items()
           if not k.startswith('JAX_INTERPRET_PATCHES_')}
    env.update(PYTHONPATH=os.pathsep.join([REPO, self.venv.deps]),
               JAX_INTERPRET_PATCHES_CACHE=cache, HOME=self.home)
    proc = _run([sys.executable, '-m', 'migration', 'check',
                 f'--version={VERSION}'], env=env, cwd=self.root,
                timeout=TIMEOUT_S)
    self.assertEqual(proc.returncode, 5, proc.stderr)
    self.assertIn('is not used', proc.stderr)
    self.assertEqual(os.listdir(att), [])
    # Nor read from it, when a wheel is already there: it could be swapped
    # after its hash is checked (the released one here).
    os.makedirs(os.path.join(cache, 'wheels'))
    shutil.copy(self.wheel, os.path.join(cache, 'wheels'))
    self._chown_tree(att, (uid, gid))
    out = os.path.join(self.root, 'wheel-out')
    self.addCleanup(shutil.rmtree, out, ignore_errors=True)
    for args in (['check', f'--version={VERSION}'],
                 ['wheel', f'--version={VERSION}', '-o', out]):
      proc = _run([sys.executable, '-m', 'migration', *args], env=env,
                  cwd=self.root, timeout=TIMEOUT_S)
      self.assertEqual(proc.returncode, 5, proc.stderr)
      self.assertIn('could swap it', proc.stderr)
    self.assertFalse(os.path.exists(out) and os.listdir(out))

  def test_venv_of_a_distributions_python_is_probed(self):
    # Debian's Python installs into local/lib/.../dist-packages by default;
    # its venvs into lib/.../site-packages, which the -S probe must find.
    system = '/usr/bin/python3'
    if not os.path.exists(system):
      self.skipTest(f'no {system}')
    venv = os.path.join(self.root, 'system-venv')
    self.addCleanup(shutil.rmtree, venv, ignore_errors=True)
    proc = _run([system, '-m', 'venv', '--without-pip', venv])
    if proc.returncode:
      self.skipTest(f'{system} cannot make a venv: {proc.stderr}')
    site = _run([os.path.join(venv, 'bin', 'python'), '-c',
                 'import sysconfig; print(sysconfig.get_paths("venv" if '
                 '"venv" in sysconfig.get_scheme_names() else '
                 '"posix_prefix")["purelib"])']).stdout.strip()
    proc = _run([sys.executable, '-m', 'pip', 'install', '-q', '--no-deps',
                 '--disable-pip-version-check', '--ignore-requires-python',
                 '--no-compile', '--target', site, self.wheel])
    self.assertEqual(proc.returncode, 0, proc.stderr)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO,
                                                       self.venv.deps]))
    proc = _run([sys.executable, '-m', 'migration', 'status', '--json',
                 f'--python={os.path.join(venv, "bin", "python")}'],
                env=env, cwd=self.root, timeout=TIMEOUT_S)
    self.assertEqual(proc.returncode, 0, proc.stderr)
    data = json.loads(proc.stdout)
    self.assertEqual((data['environment']['jax'], data['state']),
                     (VERSION, 'pristine'))

  def test_pth_files_of_the_inspected_python_do_not_run(self):
    # --python runs the named interpreter to find its jax: with -I -S, none
    # of its .pth files (code of whoever can write its site-packages) runs
    # in that probe, which may be root's.
    marker = os.path.join(self.root, 'pth-ran')
    pth = os.path.join(self.venv.site, 'zz_probe_test.pth')
    with open(pth, 'w') as f:
      f.write(f'import os; open({marker!r}, "a").write("ran\\n")\n')
    self.addCleanup(os.remove, pth)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO,
                                                       self.venv.deps]))
    for command in ('status', 'apply', 'revert'):
      proc = _run([sys.executable, '-m', 'migration', command, '--json',
                   f'--python={self.venv.python}'], env=env, cwd=self.root,
                  timeout=TIMEOUT_S)
      self.assertEqual(proc.returncode, 0, proc.stderr)
      self.assertEqual(json.loads(proc.stdout)['exit_code'], 0)
      self.assertFalse(os.path.exists(marker), f'{command}: the .pth ran')
    # The interpreter itself runs it (the check of this test).
    _run([self.venv.python, '-c', 'pass'])
    self.assertTrue(os.path.exists(marker))

  def test_python_another_user_can_change_is_not_run(self):
    # Its executable's folder or its pyvenv.cfg (whose `home` says where
    # its standard library is) is another user's: running it would run
    # their code as root.
    uid, gid = self._other_user()
    venv_dir = os.path.dirname(os.path.dirname(self.venv.python))
    cfg = os.path.join(venv_dir, 'pyvenv.cfg')
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO,
                                                       self.venv.deps]))
    for name, path in (('its folder', os.path.dirname(self.venv.python)),
                       ('its pyvenv.cfg', cfg)):
      with self.subTest(case=name):
        os.chown(path, uid, gid)
        try:
          proc = _run([sys.executable, '-m', 'migration', 'status',
                       f'--python={self.venv.python}'], env=env,
                      cwd=self.root, timeout=TIMEOUT_S)
        finally:
          os.chown(path, 0, 0)
        self.assertEqual(proc.returncode, 5, proc.stderr)
        self.assertIn(f'belongs to {OTHER_USER}', proc.stderr)
        self.assertIn('Nothing was run', proc.stderr)

  # Issue 42: one lock per install, whatever reached it.

  def _stopped_run(self, command: str, step: str,
                   env: dict[str, str] | None = None) -> subprocess.Popen:
    """Starts the tool on A; returns once it stopped itself at ``step``."""
    full_env = {k: v for k, v in os.environ.items()
                if not k.startswith('JAX_INTERPRET_PATCHES_')}
    full_env.update(
        PYTHONPATH=os.pathsep.join([REPO, self.venv.deps, self.a.site]),
        PYTHONDONTWRITEBYTECODE='1', TMPDIR=self.tmp, HOME=self.home,
        **{transaction.SIGNAL_ENV: f'{step}:{int(signal.SIGSTOP)}'})
    full_env.update(env or {})
    proc = subprocess.Popen(
        [self.venv.python, '-m', 'migration', command], cwd=self.root,
        env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    self.addCleanup(lambda: proc.poll() is None and proc.kill())
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
      with open(f'/proc/{proc.pid}/stat') as f:
        if f.read().rsplit(')', 1)[1].split()[0] == 'T':
          return proc
      if proc.poll() is not None:
        self.fail(f'{command} ended before {step}: {proc.communicate()}')
      time.sleep(0.05)
    self.fail(f'{command} did not reach {step}')

  def _resume(self, proc: subprocess.Popen) -> tuple[int, str]:
    proc.send_signal(signal.SIGCONT)
    try:
      _, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
      self.fail('the stopped run hung after SIGCONT')
    return proc.returncode, err

  def test_one_lock_per_install_whatever_the_state_root(self):
    other_root = os.path.join(self.root, 'other-state')
    self.addCleanup(shutil.rmtree, other_root, ignore_errors=True)
    linked = os.path.join(self.root, 'linked-site')
    os.symlink(self.a.site, linked)
    self.addCleanup(os.remove, linked)
    # A holds the lock of its install, half-way through its commit.
    a = self._stopped_run('apply', 'replaced-3',
                          env={'JAX_INTERPRET_PATCHES_STATE_DIR': other_root})
    mixed = self.a.hashes()
    temps = fsutil.leftovers(os.path.dirname(self.a.path(f))
                             for f in self.files)
    self.assertNotEqual(temps, [])
    # B reaches the same install without the variable, or through a link.
    for how, env, site in (('default root', {}, self.a.site),
                           ('through a link', {}, linked)):
      with self.subTest(how=how):
        b = Install(self, site)
        proc = b.tool('revert', env=env, expect=6)
        self.assertIn('Another run holds the lock', proc.stderr)
        self.assertEqual(self.a.hashes(), mixed)
        self.assertEqual(
            fsutil.leftovers(os.path.dirname(self.a.path(f))
                             for f in self.files), temps)
    code, err = self._resume(a)
    self.assertEqual(code, 0, err)
    self.assertEnd(self.a, 'patched')
    self.a.tool('revert', env={'JAX_INTERPRET_PATCHES_STATE_DIR': other_root})
    self.assertEnd(self.a, 'pristine')
    self.assertNoLeftovers(self.a)

  def test_relative_state_dir_is_a_usage_error(self):
    for command in ('status', 'apply'):
      proc = self.a.tool(command,
                         env={'JAX_INTERPRET_PATCHES_STATE_DIR': 'state'},
                         expect=2)
      self.assertIn('not an absolute path', proc.stderr)
    self.assertEnd(self.a, 'pristine')
    self.assertFalse(os.path.exists(os.path.join(self.root, 'state')))

  # Issue 42: compare and swap; an edit saved during a run is kept.

  def test_edit_saved_during_apply_is_kept(self):
    # The file the commit replaces last (in path order), edited before the
    # commit and after its first replace.
    edited = sorted(self.files)[-1]
    for step in ('temp-written', 'replaced-1'):
      with self.subTest(step=step):
        self.setUp()
        a = self._stopped_run('apply', step)
        with open(self.a.path(edited), 'ab') as f:
          f.write(b'# saved while apply ran\n')
        code, err = self._resume(a)
        self.assertEqual(code, 4, err)
        self.assertIn(f'{edited} changed while', err)
        self.assertNotIn('Traceback', err)
        want = dict(self.pristine_sha)
        want[edited] = manifest_lib.sha256_bytes(
            self.pristine[edited] + b'# saved while apply ran\n')
        self.assertEqual(self.a.hashes(), want)
        self.assertNoLeftovers(self.a)

  # Issue 42: recovery after the venv moved, or jax was replaced.

  def test_killed_run_is_recovered_after_the_install_moves(self):
    self.a.kill('apply', 'replaced-3')
    moved = Install(self, self.a.site + '-moved')
    os.rename(self.a.site, moved.site)
    self.addCleanup(os.rename, moved.site, self.a.site)
    self.assertTrue(moved.status()['interrupted'])
    proc = moved.tool('apply')
    self.assertIn('Completed an interrupted apply', proc.stdout)
    self.assertEnd(moved, 'patched')
    moved.tool('revert')
    self.assertEnd(moved, 'pristine')
    self.assertNoLeftovers(moved)

  def test_killed_run_then_another_jax_installed(self):
    # The newest release of the line before, whose files differ.
    line = VERSION.split('.')[:2]
    other = [v for v in self.manifest.served_versions()
             if v.split('.')[:2] != line][-1]
    other_wheel = wheels.pristine_wheel(other)
    self.a.kill('apply', 'replaced-3')
    temps = fsutil.leftovers(os.path.dirname(self.a.path(f))
                             for f in self.files)
    self.assertNotEqual(temps, [])
    # As pip replaces jax: the files its RECORD lists go, the other
    # release's come; the tool's temporary files stay.
    _replace_like_pip(self.a.site, self.wheel, other_wheel)
    self.addCleanup(self.a.reinstall)
    self.assertTrue(all(os.path.exists(t) for t in temps))
    # Nothing to settle: jax is another one now.
    self.assertFalse(self.a.status()['interrupted'])
    self.a.tool('revert')
    self.assertTrue(all(not os.path.exists(t) for t in temps))
    self.assertFalse(os.path.lexists(os.path.join(self.a.state_dir,
                                                  'journal.json')))
    self.assertFalse(self.a.status()['interrupted'])

  def test_orphaned_temporary_files_are_kept(self):
    # A run killed in its commit under another state root: its journal is
    # not where this run looks, so its temporary files are kept.
    other_root = os.path.join(self.root, 'other-state')
    self.addCleanup(shutil.rmtree, other_root, ignore_errors=True)
    env = {'JAX_INTERPRET_PATCHES_STATE_DIR': other_root}
    proc = self.a.tool('apply', env={**env,
                                     transaction.KILL_ENV: 'replaced-3'},
                       expect=None)
    self.assertEqual(proc.returncode, -9, proc.stderr)
    mixed = self.a.hashes()
    temps = fsutil.leftovers(os.path.dirname(self.a.path(f))
                             for f in self.files)
    for command in ('apply', 'revert'):
      proc = self.a.tool(command, expect=4)
      self.assertIn('its journal is not in', proc.stderr)
      self.assertEqual(self.a.hashes(), mixed)
      self.assertEqual(fsutil.leftovers(
          os.path.dirname(self.a.path(f)) for f in self.files), temps)
    self.a.tool('revert', env=env)
    self.assertEnd(self.a, 'pristine')
    self.assertNoLeftovers(self.a)

  def test_missing_filelock_is_an_environment_problem(self):
    # The running Python without filelock: exit 5 naming it, no traceback.
    deps = os.path.join(self.root, 'deps-without-filelock')
    os.makedirs(deps, exist_ok=True)
    self.addCleanup(shutil.rmtree, deps, ignore_errors=True)
    absl_dir = os.path.join(self.venv.deps, 'absl')
    if not os.path.lexists(os.path.join(deps, 'absl')):
      os.symlink(os.path.realpath(absl_dir), os.path.join(deps, 'absl'))
    proc = self.a.tool('apply', expect=5, env={
        'PYTHONPATH': os.pathsep.join([REPO, deps, self.a.site])})
    self.assertIn('filelock', proc.stderr)
    self.assertEnd(self.a, 'pristine')

  def assertNoLeftovers(self, inst: Install) -> None:
    self.assertEqual(fsutil.leftovers(
        os.path.dirname(inst.path(f)) for f in self.files), [])

  # Item 5: corrupt state files.

  def test_corrupt_state_files(self):
    dev_zero = lambda p: os.symlink('/dev/zero', p)  # noqa: E731

    def writer(data: bytes):
      def write(p):
        with open(p, 'wb') as f:
          f.write(data)
      return write

    cases = [
        ('applied.json', '1', writer(b'1'), 7),
        ('applied.json', '"x"', writer(b'"x"'), 7),
        ('applied.json', 'no series', writer(b'{"dist_version": "1"}'), 7),
        ('applied.json', 'displaced outside jax', writer(json.dumps({
            'series': 's', 'jax_version': VERSION, 'dist_version': VERSION,
            'displaced': {'../../x': '0' * 64}}).encode()), 7),
        ('applied.json', 'huge', writer(b' ' * (2 << 20) + b'{}'), 7),
        ('applied.json', 'FIFO', os.mkfifo, 5),
        ('applied.json', '/dev/zero link', dev_zero, 5),
        ('journal.json', '1', writer(b'1'), 7),
        ('journal.json', 'FIFO', os.mkfifo, 5),
        ('journal.json', '/dev/zero link', dev_zero, 5),
    ]
    for name, what, plant, code in cases:
      for start in ('pristine', 'patched'):
        with self.subTest(file=name, content=what, start=start):
          self.setUp()
          if start == 'patched':
            self.a.tool('apply')
          os.makedirs(self.a.state_dir, exist_ok=True)
          # In the install's folder, and where interpret.1 looked.
          for d in (self.a.state_dir, self.a.state_root):
            path = os.path.join(d, name)
            fsutil.remove(path)
            plant(path)
          command = 'apply' if start == 'pristine' else 'revert'
          self.a.tool(command, expect=code)
          self.a.tool(command, '--dry-run', expect=code)
          self.assertEnd(self.a, start)
          data = self.a.status()
          self.assertIn(f'exit {code}', data['state_problem'])

  # Item 7: a full $TMPDIR.

  def _small_tmpdir(self) -> None:
    proc = _run(['mount', '-t', 'tmpfs', '-o', 'size=64k,mode=0700', 'tmpfs',
                 self.tmp])
    if proc.returncode:
      self.skipTest(f'mount -t tmpfs is not permitted here: {proc.stderr}')
    self.addCleanup(_run, ['umount', '-l', self.tmp])
    # Room for Python's probe of $TMPDIR (tempfile.gettempdir skips a
    # folder it cannot write), not for the staged files.
    free = os.statvfs(self.tmp)
    with open(os.path.join(self.tmp, 'filler'), 'wb') as f:
      f.write(b'\0' * (free.f_bavail * free.f_frsize - 8192))

  def test_small_tmpdir(self):
    self._small_tmpdir()
    # status: 0 in every state of the install.
    self.assertEqual(self.a.status()['state'], 'pristine')
    self.a.tool('apply', expect=5)
    self.a.tool('apply', '--dry-run', expect=5)
    self.assertEnd(self.a, 'pristine')
    with open(self.a.path(self.files[0]), 'ab') as f:
      f.write(b'# edit\n')
    self.assertEqual(self.a.status()['state'], 'locally modified')
    self.a.tool('apply', '--force', expect=5)
    with open(self.a.path(self.files[0]), 'wb') as f:
      f.write(self.pristine[self.files[0]])
    # Patched with a roomy $TMPDIR, then the revert with the full one.
    self.a.tool('apply', env={'TMPDIR': self.home})
    self.assertEqual(self.a.status()['state'], 'patched')
    self.a.tool('revert', expect=5)
    self.a.tool('revert', '--dry-run', expect=5)
    self.assertEnd(self.a, 'patched')
    # Mixed: one file pristine again.
    with open(self.a.path(self.files[0]), 'wb') as f:
      f.write(self.pristine[self.files[0]])
    self.assertEqual(self.a.status()['state'], 'mixed')
    proc = self.a.tool('revert', expect=4)
    self.assertIn('Refusing', proc.stderr)

  # Migration: the state of a previous release (files in the root).

  def _legacy_layout(self, inst: Install) -> None:
    """Moves the install's state into the root, as interpret.1 kept it
    (its journal without ``jax_dir``, its record without ``jax_dir``)."""
    for name in os.listdir(inst.state_dir):
      if name != 'lock':
        os.rename(os.path.join(inst.state_dir, name),
                  os.path.join(inst.state_root, name))
    shutil.rmtree(inst.state_dir)
    for name in ('applied.json', 'journal.json'):
      p = os.path.join(inst.state_root, name)
      if os.path.exists(p):
        with open(p, encoding='utf-8') as f:
          raw = json.load(f)
        raw.pop('jax_dir', None)
        if isinstance(raw.get('record'), dict):
          raw['record'].pop('jax_dir', None)
        with open(p, 'w', encoding='utf-8') as f:
          json.dump(raw, f)

  def test_previous_release_record_is_adopted(self):
    edited = self.files[0]
    with open(self.a.path(edited), 'ab') as f:
      f.write(b'# edit before the upgrade\n')
    self.a.tool('apply', '--force')
    self._legacy_layout(self.a)
    self.assertFalse(os.path.exists(self.a.state_dir))
    # B, in the same parent, is pristine: the record is not B's.
    self.b.tool('apply')
    self.b.tool('revert')
    self.assertEnd(self.b, 'pristine')
    self.assertTrue(os.path.exists(
        os.path.join(self.a.state_root, 'applied.json')))
    proc = self.a.tool('revert', '--dry-run', '--json')
    self.assertEqual(json.loads(proc.stdout)['displaced'], [edited])
    self.a.tool('revert')
    with open(self.a.path(edited), 'rb') as f:
      self.assertTrue(f.read().endswith(b'# edit before the upgrade\n'))
    self.assertFalse(os.path.exists(
        os.path.join(self.a.state_root, 'applied.json')))

  def test_previous_release_journal_is_settled_by_its_install(self):
    self.a.kill('apply', 'replaced-1')
    mixed = self.a.hashes()
    self._legacy_layout(self.a)
    self.assertTrue(self.a.status()['interrupted'])
    self.assertFalse(self.b.status()['interrupted'])
    self.b.tool('apply')
    self.assertEqual(self.a.hashes(), mixed)
    self.assertTrue(os.path.exists(
        os.path.join(self.a.state_root, 'journal.json')))
    self.a.tool('apply')
    self.assertEnd(self.a, 'patched')
    self.assertFalse(os.path.exists(
        os.path.join(self.a.state_root, 'journal.json')))
    self.assertFalse(self.a.status()['interrupted'])


if __name__ == '__main__':
  absltest.main()
