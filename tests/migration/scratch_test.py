"""The sweep of scratch directories keeps live ones, in any PID namespace.

Scratch directories are made by ``fsutil.scratch`` in child processes (as
the tool's runs make them) in a test-owned ``$TMPDIR``; ``sweep_scratch``
runs in this process or in another child. A directory whose maker lives
must survive, even where the process id in its name is dead (another PID
namespace), and one whose maker was killed must go. Two PID namespaces
need ``unshare -p`` (root); that test skips with the reason elsewhere.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

from absl.testing import absltest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from migration import fsutil  # noqa: E402

# A run's scratch directory: made, its path printed, kept until stdin ends.
_OWNER = textwrap.dedent('''
    import sys
    from migration import fsutil
    with fsutil.scratch('stage') as d:
      with open(d + '/data', 'w') as f:
        f.write('in use')
      print(d, flush=True)
      sys.stdin.read()
''')
# In a new PID namespace the first process is 1: the owner runs as 2.
_OWNER_AS_PID_2 = ('import subprocess, sys; '
                   f'subprocess.run([sys.executable, "-c", {_OWNER!r}])')
# A sweep that first says whether process id 2 is alive where it runs.
_SWEEP = ('import os; from migration import fsutil; '
          'print(fsutil._alive(2)); fsutil.sweep_scratch()')
_UNSHARE = ['unshare', '--pid', '--fork', '--mount-proc', '--kill-child']
_TIMEOUT_S = 60


def _dead_pid() -> int:
  """A process id no process has: above the kernel's largest."""
  with open('/proc/sys/kernel/pid_max', encoding='ascii') as f:
    return int(f.read()) + 1


def _unshare_problem() -> str | None:
  """Why ``unshare`` cannot make a PID namespace here, or None."""
  if shutil.which('unshare') is None:
    return 'no unshare command (util-linux)'
  try:
    proc = subprocess.run([*_UNSHARE, 'true'], capture_output=True,
                          text=True, timeout=_TIMEOUT_S, check=False)
  except subprocess.TimeoutExpired:
    return 'unshare did not finish'
  if proc.returncode:
    return (f'unshare cannot make a PID namespace (needs root): '
            f'{proc.stderr.strip()}')
  return None


class ScratchSweepTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.tmp = os.path.realpath(tempfile.mkdtemp(prefix='scratch-test-'))
    self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
    self.env = dict(os.environ, TMPDIR=self.tmp, PYTHONPATH=REPO,
                    PYTHONDONTWRITEBYTECODE='1')
    self.outside = os.path.realpath(tempfile.mkdtemp(prefix='scratch-out-'))
    self.addCleanup(shutil.rmtree, self.outside, ignore_errors=True)
    self.victim = os.path.join(self.outside, 'victim')
    with open(self.victim, 'w', encoding='utf-8') as f:
      f.write('must not change\n')

  def start_owner(self, prefix: list[str], code: str = _OWNER
                  ) -> tuple[subprocess.Popen, str]:
    """Starts a process that makes a scratch directory; returns its path."""
    proc = subprocess.Popen(
        [*prefix, sys.executable, '-c', code], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True, env=self.env, cwd=self.tmp,
        start_new_session=True)
    self.addCleanup(self.stop, proc)
    ready, _, _ = select.select([proc.stdout], [], [], _TIMEOUT_S)
    self.assertTrue(ready, 'the owner did not make its scratch directory')
    path = proc.stdout.readline().strip()
    self.assertEqual(os.path.dirname(path), self.tmp)
    return proc, path

  def stop(self, proc: subprocess.Popen) -> None:
    if proc.poll() is None:
      os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=_TIMEOUT_S)
    proc.stdout.close()
    proc.stdin.close()

  def kill(self, proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    self.assertEqual(proc.wait(timeout=_TIMEOUT_S), -signal.SIGKILL)

  def sweep(self, prefix: list[str] = ()) -> str:
    """Runs ``sweep_scratch`` in a child; returns what it printed."""
    return subprocess.run(
        [*prefix, sys.executable, '-c', _SWEEP], env=self.env, check=True,
        capture_output=True, text=True, timeout=_TIMEOUT_S).stdout.strip()

  def assertLive(self, path: str) -> None:
    with open(os.path.join(path, 'data'), encoding='utf-8') as f:
      self.assertEqual(f.read(), 'in use')

  def assertVictimUnchanged(self) -> None:
    with open(self.victim, encoding='utf-8') as f:
      self.assertEqual(f.read(), 'must not change\n')

  def legacy_dir(self, pid: int, age_s: float) -> str:
    """A scratch directory as older tool versions made it (no lock file)."""
    path = tempfile.mkdtemp(prefix=f'{fsutil.SCRATCH_PREFIX}stage-{pid}-',
                            dir=self.tmp)
    then = time.time() - age_s
    os.utime(path, (then, then))
    return path

  def test_removal_cut_short_leaves_a_folder_the_sweep_removes(self):
    # Out of file descriptors (ulimit -n) while a scratch folder is removed:
    # its lock file goes last, so the folder stays owned, and the next
    # sweep removes it once its maker has ended (not a day later).
    code = textwrap.dedent('''
        import errno, os
        from migration import fsutil
        try:
          with fsutil.scratch('stage') as d:
            os.makedirs(os.path.join(d, 'a', 'b', 'c'))
            print(d, flush=True)
            spare = []
            try:
              while True:
                spare.append(os.open(os.devnull, os.O_RDONLY))
            except OSError as e:
              assert e.errno == errno.EMFILE
            for fd in spare[-2:]:  # Enough to start, not to finish.
              os.close(fd)
        except OSError as e:
          print('failed', e.errno == errno.EMFILE, flush=True)
        print(os.path.exists(os.path.join(d, fsutil.OWNER_LOCK)), flush=True)
        ''')
    proc = subprocess.run([sys.executable, '-c', code], env=self.env,
                          cwd=self.tmp, capture_output=True, text=True,
                          timeout=_TIMEOUT_S, check=False)
    self.assertEqual(proc.returncode, 0, proc.stderr)
    path, failed, locked = proc.stdout.splitlines()
    self.assertEqual((failed, locked), ('failed True', 'True'))
    self.assertTrue(os.path.isdir(path))
    self.sweep()
    self.assertFalse(os.path.exists(path))

  def test_live_dir_with_a_dead_pid_in_its_name_is_kept(self):
    # As another PID namespace's run looks: its pid is not alive here.
    proc, path = self.start_owner([])
    dead = _dead_pid()
    renamed = path.replace(f'-stage-{proc.pid}-', f'-stage-{dead}-')
    self.assertNotEqual(renamed, path)
    os.rename(path, renamed)
    self.assertFalse(fsutil._alive(dead))
    self.sweep()
    self.assertLive(renamed)
    # Its maker killed: the next sweep removes it.
    self.kill(proc)
    self.sweep()
    self.assertEqual(os.listdir(self.tmp), [])

  def test_own_live_dir_is_kept(self):
    old = tempfile.tempdir
    tempfile.tempdir = self.tmp
    try:
      with fsutil.scratch('stage') as d:
        fsutil.sweep_scratch()
        self.assertTrue(os.path.isdir(d))
        self.assertEqual(os.listdir(d), [fsutil.OWNER_LOCK])
      self.assertEqual(os.listdir(self.tmp), [])
    finally:
      tempfile.tempdir = old

  def test_dir_of_an_older_version_goes_when_old_and_its_pid_dead(self):
    hour = 3600
    age = fsutil.LEGACY_SCRATCH_AGE_S
    dead = _dead_pid()
    young = self.legacy_dir(dead, age - hour)
    old_live_pid = self.legacy_dir(os.getpid(), age + hour)
    old_dead = self.legacy_dir(dead, age + hour)
    self.sweep()
    self.assertTrue(os.path.isdir(young))
    self.assertTrue(os.path.isdir(old_live_pid))
    self.assertFalse(os.path.lexists(old_dead))

  def test_links_and_other_names_are_left_alone(self):
    dead = _dead_pid()
    name = f'{fsutil.SCRATCH_PREFIX}stage-{dead}-'
    # A link with a scratch name, to a directory outside.
    link = os.path.join(self.tmp, name + 'link')
    os.symlink(self.outside, link)
    # A lock file that is a link to a file outside.
    planted = os.path.join(self.tmp, name + 'planted')
    os.mkdir(planted)
    os.symlink(self.victim, os.path.join(planted, fsutil.OWNER_LOCK))
    # Names that are not the tool's scratch names, unlocked and old.
    others = [os.path.join(self.tmp, n) for n in (
        f'stage-{dead}-x', f'{fsutil.SCRATCH_PREFIX}check-x',
        f'{fsutil.SCRATCH_PREFIX}stage-x-')]
    for d in others:
      os.mkdir(d)
      open(os.path.join(d, fsutil.OWNER_LOCK), 'w').close()
      os.utime(d, (0, 0))
    # A gone run's directory with a link to outside: removed, the link
    # itself, not what it points to.
    proc, gone = self.start_owner([])
    os.symlink(self.outside, os.path.join(gone, 'out'))
    self.kill(proc)
    self.sweep()
    self.assertEqual(os.readlink(link), self.outside)
    self.assertTrue(os.path.islink(os.path.join(planted, fsutil.OWNER_LOCK)))
    for d in others:
      self.assertTrue(os.path.isdir(d), d)
    self.assertFalse(os.path.lexists(gone))
    self.assertEqual(os.listdir(self.outside), ['victim'])
    self.assertVictimUnchanged()

  def test_unlocked_dir_of_another_user_is_kept(self):
    if os.geteuid() != 0:
      self.skipTest('needs root to give a directory to another user')
    proc, path = self.start_owner([])
    self.kill(proc)
    try:
      os.chown(path, 12345, 12345)
    except OSError as e:  # EINVAL: a user namespace without that user.
      self.skipTest(f'cannot give a directory to another user here: {e}')
    self.sweep()
    self.assertTrue(os.path.isdir(path))

  def test_runs_in_two_pid_namespaces(self):
    problem = _unshare_problem()
    if problem:
      self.skipTest(problem)
    proc, path = self.start_owner(_UNSHARE, _OWNER_AS_PID_2)
    self.assertIn(f'{fsutil.SCRATCH_PREFIX}stage-2-', path)
    # In the sweeper's own namespace, process 2 does not exist: a sweep by
    # process id would remove the live directory.
    self.assertEqual(self.sweep(_UNSHARE), 'False')
    self.assertLive(path)
    # The owner's namespace killed: a sweep in a third one removes it.
    self.kill(proc)
    deadline = time.monotonic() + _TIMEOUT_S
    while os.path.lexists(path) and time.monotonic() < deadline:
      self.sweep(_UNSHARE)  # The kernel ends the namespace asynchronously.
      time.sleep(0.1)
    self.assertEqual(os.listdir(self.tmp), [])


if __name__ == '__main__':
  absltest.main()
