"""Fault injection: wheel output, git config, odd paths, owners, signals.

Real faults against real venvs, as ``fault_test.py``: a link planted at the
wheel's old temporary name, ``-o`` a file, a read-only or immutable folder
or one that is full (tmpfs), a ``~/.gitconfig`` with ``core.autocrlf``, a
site-packages path that is not UTF-8, a venv owned by another user, real
SIGINT/SIGTERM/SIGHUP sent to running commands, a truncated wheel, a
relative ``XDG_CACHE_HOME`` and a closed stderr. Each test checks the exit
code, that no traceback is printed, that jax ends pristine or fully patched
(hashes from jax's RECORD and from ``git apply`` of the series, computed
here) and that nothing outside the tool's places changed.

Tests that need root (mounts, ``chattr``, ``chown``) skip with the reason
where the machine does not allow them.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
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
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _sha(data: bytes) -> str:
  return hashlib.sha256(data).hexdigest()


def _run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess[str]:
  return subprocess.run(cmd, capture_output=True, text=True, check=False,
                        errors='surrogateescape', **kwargs)


def _signals_as_from_a_shell() -> None:
  """In the child before exec: the three signals at their default action.

  A test run under ``nohup`` (or a CI runner that ignores SIGHUP) would pass
  the ignored SIGHUP on to the tool, which keeps it ignored, as it should.
  The signal mask stays the parent's.
  """
  for signum in SIGNALS:
    signal.signal(signum, signal.SIG_DFL)


def _listing(root: str) -> dict[str, tuple]:
  """Path -> (mode, size, mtime) of every file under ``root``; of a folder,
  its mode (a file made and removed in it changes its mtime)."""
  out = {}
  for d, dirs, files in os.walk(root):
    for name in dirs:
      out[os.path.join(d, name)] = (os.lstat(os.path.join(d, name)).st_mode,)
    for name in files:
      st = os.lstat(os.path.join(d, name))
      out[os.path.join(d, name)] = (st.st_mode, st.st_size, st.st_mtime_ns)
  return out


class OutputFaultTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.manifest = manifest_lib.load(PATCHES)
    if VERSION != cls.manifest.served_versions()[-1]:
      raise absltest.SkipTest(
          'the fault suite runs once, for the newest served release')
    cls.files = list(cls.manifest.series_for(VERSION).files)
    cls.wheel = wheels.pristine_wheel(VERSION)
    cls.wheel_dir = os.path.dirname(cls.wheel)
    cls.venv = venv_util.make('migration-output-', cls.wheel, with_pip=False)
    cls.root = cls.venv.root
    # The expected ends, computed independently of the tool.
    ends = venv_util.expected_ends(
        cls.venv, cls.wheel, VERSION, cls.files,
        [p.path for p in cls.manifest.series_for(VERSION).to_apply(VERSION)])
    cls.pristine = ends.pristine
    cls.pristine_sha, cls.patched_sha = ends.pristine_sha, ends.patched_sha
    cls.wheel_name = (f'jax-{VERSION}+interpret.{cls.manifest.release}'
                      '-py3-none-any.whl')

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root, ignore_errors=True)
    super().tearDownClass()

  def setUp(self):
    super().setUp()
    self.venv.restore(self.pristine)
    self.work = os.path.join(self.root, 'work')
    shutil.rmtree(self.work, ignore_errors=True)
    for d in ('tmp', 'home', 'decoy', 'cwd'):
      os.makedirs(os.path.join(self.work, d))
    self.tmp = os.path.join(self.work, 'tmp')
    self.home = os.path.join(self.work, 'home')
    self.victim = os.path.join(self.work, 'decoy', 'victim')
    with open(self.victim, 'wb') as f:
      f.write(b'must not change\n')

  def env(self, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(('JAX_INTERPRET_PATCHES_', 'GIT_'))}
    env.update(PYTHONPATH=os.pathsep.join([REPO, self.venv.deps]),
               PYTHONDONTWRITEBYTECODE='1', TMPDIR=self.tmp, HOME=self.home,
               XDG_CACHE_HOME=os.path.join(self.home, 'c'),
               JAX_INTERPRET_PATCHES_WHEEL_DIRS=self.wheel_dir)
    env.update(extra)
    return env

  def run_tool(self, *args: str, expect: int | None = 0,
               python: str | None = None, env: dict[str, str] | None = None,
               cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    """Runs the tool; checks the exit code and that there is no traceback."""
    proc = _run([python or self.venv.python, '-m', 'migration', *args],
                preexec_fn=_signals_as_from_a_shell,
                cwd=cwd or os.path.join(self.work, 'cwd'),
                env=env or self.env())
    if expect is not None:
      self.assertEqual(proc.returncode, expect,
                       f'{args}\nstdout:\n{proc.stdout}\nstderr:\n'
                       f'{proc.stderr}')
    self.assertNotIn('Traceback', proc.stderr + proc.stdout)
    return proc

  def hashes(self, site: str | None = None) -> dict[str, str | None]:
    return {p: manifest_lib.sha256_path(
        os.path.join(site or self.venv.site, *p.split('/')))
            for p in self.files}

  def assertAtAnEnd(self) -> str:
    got = self.hashes()
    self.assertIn(got, (self.pristine_sha, self.patched_sha))
    return 'pristine' if got == self.pristine_sha else 'patched'

  def assertNoLeftovers(self) -> None:
    left = [os.path.join(d, f)
            for top in (os.path.join(self.venv.site, 'jax'),
                        self.venv.state_dir)
            for d, _, files in os.walk(top) for f in files
            if f.startswith(fsutil.TMP_PREFIX) or f == 'journal.json']
    self.assertEqual(left + os.listdir(self.tmp), [])

  def build_wheel(self, out: str, expect: int, *args: str,
                  env: dict[str, str] | None = None,
                  cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    """``wheel`` with the test's Python (it has pip and ``wheel``)."""
    return self.run_tool('wheel', f'--version={VERSION}', '-o', out, *args,
                         expect=expect, python=sys.executable, env=env,
                         cwd=cwd)

  def _mount_tmpfs(self, path: str, options: str) -> None:
    proc = _run(['mount', '-t', 'tmpfs', '-o', options, 'tmpfs', path])
    if proc.returncode:
      self.skipTest(f'mount -t tmpfs is not permitted here: {proc.stderr}')
    self.addCleanup(_run, ['umount', '-l', path])

  def _chattr_immutable(self, path: str) -> None:
    if shutil.which('chattr') is None:
      self.skipTest('chattr is not installed (e2fsprogs)')
    proc = _run(['chattr', '+i', path])
    if proc.returncode:
      self.skipTest(f'chattr +i is not permitted here: {proc.stderr}')
    self.addCleanup(_run, ['chattr', '-i', path])

  # wheel -o: the output folder.

  def test_wheel_does_not_follow_a_link_at_its_old_temporary_name(self):
    out = os.path.join(self.work, 'out')
    os.makedirs(out)
    os.symlink(self.victim, os.path.join(out, self.wheel_name + '.tmp'))
    self.build_wheel(out, 0)
    with open(self.victim, 'rb') as f:
      self.assertEqual(f.read(), b'must not change\n')
    self.assertEqual(sorted(os.listdir(out)),
                     [self.wheel_name, self.wheel_name + '.tmp'])
    with zipfile.ZipFile(os.path.join(out, self.wheel_name)) as zf:
      self.assertEqual({p: _sha(zf.read(p)) for p in self.files},
                       self.patched_sha)

  def test_wheel_output_faults_exit_5_and_leave_nothing(self):
    out = os.path.join(self.work, 'out')

    def make_file():
      with open(out, 'wb') as f:
        f.write(b'a file\n')

    def make_read_only():
      os.makedirs(out)
      self._mount_tmpfs(out, 'size=8m,ro')

    def make_immutable():
      os.makedirs(out)
      self._chattr_immutable(out)

    def make_dir_at_name():
      os.makedirs(os.path.join(out, self.wheel_name, 'inside'))

    def make_full():
      os.makedirs(out)
      self._mount_tmpfs(out, 'size=1m')  # The wheel is 3.4 MB.

    for name, make in (('-o a regular file', make_file),
                       ('read-only mount', make_read_only),
                       ('immutable folder', make_immutable),
                       ('a folder at the wheel name', make_dir_at_name),
                       ('full file system', make_full)):
      with self.subTest(name):
        make()
        before = _listing(self.work)
        proc = self.build_wheel(out, 5)
        self.assertIn('exit code 5', proc.stderr)
        self.assertEqual(proc.stdout, '')
        self.assertEqual(_listing(self.work), before)
        self.doCleanups()
        if os.path.isdir(out):
          shutil.rmtree(out)
        else:
          os.remove(out)

  # git configuration of the user and the system.

  def test_global_git_config_is_ignored(self):
    with open(os.path.join(self.home, '.gitconfig'), 'w',
              encoding='utf-8') as f:
      f.write('[core]\n\tautocrlf = true\n\teol = crlf\n'
              '[apply]\n\twhitespace = error\n')
    env = self.env(GIT_CONFIG_COUNT='1', GIT_CONFIG_KEY_0='core.autocrlf',
                   GIT_CONFIG_VALUE_0='true')
    self.run_tool('apply', env=env)
    self.assertEqual(self.hashes(), self.patched_sha)
    self.run_tool('revert', env=env)
    self.assertEqual(self.hashes(), self.pristine_sha)
    out = os.path.join(self.work, 'out')
    self.build_wheel(out, 0, env=env)
    with zipfile.ZipFile(os.path.join(out, self.wheel_name)) as zf:
      self.assertEqual({p: _sha(zf.read(p)) for p in self.files},
                       self.patched_sha)

  # A site-packages path that is not UTF-8.

  def test_site_packages_path_not_utf8(self):
    odd = venv_util.make('migration-output-', self.wheel, with_pip=False)
    moved = os.fsdecode(os.fsencode(odd.root) + b'-\xff\xfe')
    os.rename(odd.root, moved)
    self.addCleanup(shutil.rmtree, moved, ignore_errors=True)
    python = os.path.join(moved, 'venv', 'bin', 'python')
    site = moved + odd.site[len(odd.root):]
    # Strict UTF-8 output, as in a UTF-8 locale such as en_US.UTF-8 (the C
    # locale's is surrogateescape).
    env = self.env(PYTHONIOENCODING='utf-8')
    for args in (('status',), ('apply', '--verbose'), ('status', '--json'),
                 ('revert', '--verbose')):
      with self.subTest(args=args):
        proc = self.run_tool(*args, python=python, env=env)
        self.assertEqual(
            self.hashes(site),
            self.patched_sha if args[0] == 'apply' or args == (
                'status', '--json') else self.pristine_sha)
        if args == ('status', '--json'):
          self.assertEqual(
              json.loads(proc.stdout)['environment']['site_packages'], site)

  # Target files of another owner and group in the owner's install (a
  # run as another user than the owner of site-packages/jax is refused:
  # state_fault_test).

  def test_replaced_files_keep_owner_group_and_mode(self):
    targets = [self.venv.path(p) for p in self.files]
    uid, gid = 54321, 54322
    proc = _run(['chown', f'{uid}:{gid}', *targets])
    if proc.returncode:
      self.skipTest(f'chown is not permitted here: {proc.stderr}')
    self.addCleanup(_run, ['chown', f'{os.getuid()}:{os.getgid()}',
                           *targets])
    modes = {p: 0o664 if i % 2 else 0o640 for i, p in enumerate(self.files)}
    for p, mode in modes.items():
      os.chmod(self.venv.path(p), mode)
    for command, want in (('apply', self.patched_sha),
                          ('revert', self.pristine_sha)):
      self.run_tool(command)
      self.assertEqual(self.hashes(), want)
      for p, mode in modes.items():
        st = os.stat(self.venv.path(p))
        self.assertEqual((st.st_uid, st.st_gid, st.st_mode & 0o7777),
                         (uid, gid, mode), f'{command}: {p}')

  # Signals.

  def test_signal_at_every_step_ends_at_an_end_with_128_plus_n(self):
    steps = transaction.steps(len(self.files))
    commit = steps.index('temp-written')  # Where the deferred commit starts.
    for signum in SIGNALS:
      for i, step in enumerate(steps):
        if signum != signal.SIGINT and step.startswith('replaced-'):
          continue  # The other signals take the same path.
        for command in ('apply', 'revert'):
          with self.subTest(signal=signum.name, step=step, command=command):
            env = self.env(**{transaction.SIGNAL_ENV: f'{step}:{int(signum)}'})
            before = self.assertAtAnEnd()
            proc = self.run_tool(command, expect=128 + signum, env=env)
            self.assertEqual(proc.stdout, '')
            self.assertIn(f'Stopped by {signum.name}', proc.stderr)
            # In and after the commit the step finishes; before it, nothing
            # was changed.
            goal = 'patched' if command == 'apply' else 'pristine'
            self.assertEqual(self.assertAtAnEnd(),
                             goal if i >= commit else before)
            self.assertNoLeftovers()
            self.run_tool(command)
            self.assertEqual(self.assertAtAnEnd(), goal)

  def test_signal_blocked_by_the_parent_is_handled(self):
    # A parent that blocked the signals (as a CLI run in-process by a test
    # used to leave its process) passes its mask on to the tool.
    env = self.env(**{transaction.SIGNAL_ENV: 'locked:%d' % signal.SIGINT})
    old = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    try:
      proc = self.run_tool('apply', expect=128 + signal.SIGINT, env=env)
    finally:
      signal.pthread_sigmask(signal.SIG_SETMASK, old)
    self.assertEqual(proc.stdout, '')
    self.assertIn('Stopped by SIGINT', proc.stderr)
    self.assertEqual(self.assertAtAnEnd(), 'pristine')
    self.assertNoLeftovers()

  def _interrupt_at_random(self, args: list[str], python: str,
                           signum: int, delay: float):
    proc = subprocess.Popen(
        [python, '-m', 'migration', *args], cwd=os.path.join(self.work, 'cwd'),
        env=self.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, preexec_fn=_signals_as_from_a_shell)
    # A signal before Python runs the tool's first line gets Python's
    # default action: wait until the tool handles SIGTERM (/proc's SigCgt).
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
      with open(f'/proc/{proc.pid}/status', encoding='utf-8') as f:
        caught = int(next(line for line in f
                          if line.startswith('SigCgt:')).split()[1], 16)
      if caught & (1 << (signal.SIGTERM - 1)):
        break
      time.sleep(0.002)
    time.sleep(delay)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)
    self.assertNotIn('Traceback', out + err)
    self.assertIn(proc.returncode, (0, 128 + signum), err)
    if proc.returncode:
      self.assertEqual(out, '')  # No success message.
      self.assertIn(f'Stopped by {signal.Signals(signum).name}', err)
    return proc.returncode, out

  def test_signals_at_random_moments(self):
    rng = random.Random(23)
    for n in range(12):
      signum = SIGNALS[n % 3]
      command = ('apply', 'revert')[n % 2]
      delay = rng.uniform(0, 1.2)
      with self.subTest(n=n, signal=signum.name, delay=delay):
        code, out = self._interrupt_at_random([command], self.venv.python,
                                              signum, delay)
        end = self.assertAtAnEnd()
        if code == 0:
          self.assertEqual(
              end, 'patched' if command == 'apply' else 'pristine', out)
        self.run_tool(command)
        self.assertNoLeftovers()

  def test_wheel_interrupted_leaves_no_partial_file(self):
    out = os.path.join(self.work, 'out')
    os.makedirs(out)
    rng = random.Random(11)
    for n in range(4):
      signum = SIGNALS[n % 3]
      with self.subTest(n=n, signal=signum.name):
        code, _ = self._interrupt_at_random(
            ['wheel', f'--version={VERSION}', '-o', out], sys.executable,
            signum, rng.uniform(0, 2.5))
        # Stopped, it may have finished the wheel first; never a part.
        left = os.listdir(out)
        self.assertIn(left, ([self.wheel_name], [] if code else None))
        if left:
          with zipfile.ZipFile(os.path.join(out, self.wheel_name)) as zf:
            self.assertEqual({p: _sha(zf.read(p)) for p in self.files},
                             self.patched_sha)
        self.assertEqual(os.listdir(self.tmp), [])
        fsutil.remove(os.path.join(out, self.wheel_name))

  # Small ones.

  def test_pre_release_version_is_not_served(self):
    proc = self.run_tool('wheel', '--version=1.0a1', expect=3,
                         python=sys.executable)
    self.assertIn('not served', proc.stderr)

  def test_truncated_wheel_in_wheel_dir(self):
    wheel_dir = os.path.join(self.work, 'wheels')
    os.makedirs(wheel_dir)
    with open(self.wheel, 'rb') as f:
      data = f.read()
    with open(os.path.join(wheel_dir, os.path.basename(self.wheel)),
              'wb') as f:
      f.write(data[:len(data) // 2])
    out = os.path.join(self.work, 'out')
    proc = self.build_wheel(out, 5, f'--wheel_dir={wheel_dir}')
    self.assertIn('not a readable wheel', proc.stderr)
    self.assertFalse(os.path.exists(out) and os.listdir(out))

  def test_truncated_cached_wheel_is_downloaded_again(self):
    # A relative XDG_CACHE_HOME is ignored: the cache is ~/.cache's. pip
    # "downloads" from the folder of the released wheel (no index).
    cache = os.path.join(self.home, '.cache', 'jax-interpret-patches',
                         'wheels')
    os.makedirs(cache)
    cached = os.path.join(cache, os.path.basename(self.wheel))
    with open(self.wheel, 'rb') as f:
      data = f.read()
    with open(cached, 'wb') as f:
      f.write(data[:len(data) // 3])
    cwd = os.path.join(self.work, 'cwd')
    env = self.env(XDG_CACHE_HOME='rel-cache', PIP_NO_INDEX='1',
                   PIP_FIND_LINKS=self.wheel_dir)
    del env['JAX_INTERPRET_PATCHES_WHEEL_DIRS']
    out = os.path.join(self.work, 'out')
    self.build_wheel(out, 0, env=env, cwd=cwd)
    self.assertEqual(os.listdir(cwd), [])
    with open(cached, 'rb') as f:
      self.assertEqual(f.read(), data)
    self.assertEqual(os.listdir(out), [self.wheel_name])

  def test_errors_do_not_go_to_stdout_when_stderr_is_closed(self):
    for args, code in ((['frobnicate'], 2), (['--no_such_flag', 'status'], 2),
                       (['status', '--python=/nonexistent'], 2),
                       (['wheel', '--version=1.0a1'], 3)):
      with self.subTest(args=args):
        proc = _run(['sh', '-c', 'exec "$@" 2>&-', 'sh', sys.executable,
                     '-m', 'migration', *args],
                    cwd=os.path.join(self.work, 'cwd'), env=self.env())
        self.assertEqual((proc.returncode, proc.stdout), (code, ''))


if __name__ == '__main__':
  absltest.main()
