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
import stat
import subprocess
import sys

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

  def test_root_patches_a_users_install_and_the_user_reverts(self):
    uid, gid = self._other_user()
    if not os.path.exists('/usr/bin/python3'):
      self.skipTest('no /usr/bin/python3 for another user to run')

    def chown_tree(top, owner):
      os.lchown(top, *owner)
      for d, dirs, files in os.walk(top):
        for n in dirs + files:
          os.lchown(os.path.join(d, n), *owner)

    chown_tree(self.a.site, (uid, gid))
    self.addCleanup(chown_tree, self.a.site, (0, 0))
    os.chmod(self.root, 0o711)
    self.addCleanup(os.chmod, self.root, 0o700)
    for d in (self.tmp, self.home):
      os.chown(d, uid, gid)
    self.a.tool('apply')
    self.assertEnd(self.a, 'patched')
    owners = {p: os.lstat(p).st_uid for p in [self.a.state_root] + [
        os.path.join(d, n) for d, dirs, files in os.walk(self.a.state_root)
        for n in dirs + files]}
    self.assertEqual({p for p, o in owners.items() if o != uid}, set())
    self.a.tool('revert', user=(uid, gid))
    self.assertEnd(self.a, 'pristine')

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
