"""Faults that once ended in a traceback and exit code 1, and ignored flags.

Each case of the red-team report of 2026-12-05 (F11 a, c, d, e, h, i, j;
F12's ignored flags) against a real venv with the released jax wheel: a
full stdout or stderr (``/dev/full``), a bad ``--readme``, a wheel whose
member data is corrupt, bad flag values, a venv path near ``PATH_MAX``, a
malformed test hook, a FIFO or a link to ``/dev/zero`` in place of a target
file, and flags the command does not take. Each test checks the exit code,
that no traceback is printed and, where files could change, the sha256 of
jax's target files against the manifest (computed here, not by the tool).
Commands that could hang or read without end run with a timeout and a
memory limit, so that a regression fails instead.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile

from absl.testing import absltest
import venv_util

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from migration import compat  # noqa: E402
from migration import manifest as manifest_lib  # noqa: E402
from migration import transaction  # noqa: E402
from migration import wheels  # noqa: E402

PATCHES = os.path.join(REPO, 'patches')
VERSION = os.environ.get('JAX_INTERPRET_PATCHES_TEST_VERSION', '0.12.0.1')
# A run that would block or read without end fails within this.
TIMEOUT_S = 60
# The address space a run gets where it could read without end.
MEMORY_LIMIT = 2 << 30


def _limit_memory() -> None:
  resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def _sha(path: str, dir_fd: int | None = None) -> str | None:
  """The sha256 of regular file ``path``; None if absent; 'special' if it is
  a link, FIFO or device (never opened)."""
  try:
    st = os.lstat(path, dir_fd=dir_fd)
  except FileNotFoundError:
    return None
  if not stat.S_ISREG(st.st_mode):
    return 'special'
  fd = os.open(path, os.O_RDONLY, dir_fd=dir_fd)
  with os.fdopen(fd, 'rb') as f:
    return hashlib.sha256(f.read()).hexdigest()


class CliErrorsTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.manifest = manifest_lib.load(PATCHES)
    series = cls.manifest.series_for(VERSION)
    assert series is not None, f'{VERSION} not served'
    cls.files = list(series.files)
    cls.wheel = wheels.pristine_wheel(VERSION)
    cls.venv = venv_util.make('migration-errors-', cls.wheel, with_pip=False)
    cls.root = cls.venv.root
    # The expected ends, computed independently of the tool.
    ends = venv_util.expected_ends(
        cls.venv, cls.wheel, VERSION, cls.files,
        [p.path for p in series.to_apply(VERSION)])
    cls.pristine = ends.pristine
    # The files the release ships (the series may add modules).
    cls.released = [f for f in cls.files if cls.pristine[f] is not None]
    cls.pristine_sha, cls.patched_sha = ends.pristine_sha, ends.patched_sha

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root, ignore_errors=True)
    super().tearDownClass()

  def setUp(self):
    super().setUp()
    self.venv.restore(self.pristine)
    self.work = tempfile.mkdtemp(prefix='work-', dir=self.root)
    self.addCleanup(shutil.rmtree, self.work, ignore_errors=True)

  def env(self, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(('JAX_INTERPRET_PATCHES_', 'GIT_'))}
    env.update(PYTHONPATH=os.pathsep.join([REPO, self.venv.deps]),
               PYTHONDONTWRITEBYTECODE='1',
               JAX_INTERPRET_PATCHES_WHEEL_DIRS=os.path.dirname(self.wheel))
    env.update(extra)
    return env

  def run_tool(self, *args: str, expect: int | None = 0,
               python: str | None = None, env: dict[str, str] | None = None,
               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
               ) -> subprocess.CompletedProcess[str]:
    """Runs the tool with a timeout and a memory limit; checks the exit code
    and that no traceback is printed."""
    try:
      proc = subprocess.run(
          [python or self.venv.python, '-m', 'migration', *args],
          cwd=self.work, env=env or self.env(), stdout=stdout, stderr=stderr,
          text=True, errors='replace', check=False, timeout=TIMEOUT_S,
          preexec_fn=_limit_memory)
    except subprocess.TimeoutExpired:
      self.fail(f'{args} did not end within {TIMEOUT_S} s (blocked?)')
    out, err = proc.stdout or '', proc.stderr or ''
    if expect is not None:
      self.assertEqual(proc.returncode, expect,
                       f'{args}\nstdout:\n{out}\nstderr:\n{err}')
    self.assertNotIn('Traceback', out + err)
    return proc

  def hashes(self) -> dict[str, str | None]:
    return {p: _sha(self.venv.path(p)) for p in self.files}

  def assertPristine(self):
    self.assertEqual(self.hashes(), self.pristine_sha)

  def assertPatched(self):
    self.assertEqual(self.hashes(), self.patched_sha)

  # a: stdout or stderr that cannot be written.

  def test_full_stdout_after_apply_exits_5_and_the_work_stands(self):
    with open('/dev/full', 'w') as full:
      proc = self.run_tool('apply', stdout=full, expect=5)
    self.assertIn('cannot write the report', proc.stderr)
    self.assertPatched()
    with open('/dev/full', 'w') as full:
      self.run_tool('status', stdout=full, expect=5)
      self.run_tool('revert', '--json', stdout=full, expect=5)
    self.assertPristine()

  def test_full_stdout_keeps_an_error_exit_code(self):
    with open('/dev/full', 'w') as full:
      proc = self.run_tool('wheel', '--json', '--version=../../x',
                           stdout=full, expect=2)
    self.assertIn('Error (usage, exit code 2)', proc.stderr)
    self.assertPristine()

  def test_full_stderr_usage_errors_exit_2(self):
    with open('/dev/full', 'w') as full:
      for args in (('bogus',), ('status', '--no_such_flag'), ('fork',)):
        self.run_tool(*args, stderr=full, expect=2)
    self.assertPristine()

  # c: --readme.

  def test_readme_that_cannot_be_rewritten_is_refused_first(self):
    latin = os.path.join(self.work, 'latin.md')
    with open(latin, 'wb') as f:
      f.write(b'caf\xe9\n')
    link = os.path.join(self.work, 'link.md')
    target = os.path.join(self.work, 'target.md')
    with open(target, 'w', encoding='utf-8') as f:
      f.write('must not change\n')
    os.symlink(target, link)
    fifo = os.path.join(self.work, 'fifo.md')
    os.mkfifo(fifo)
    for readme in (os.path.join(self.work, 'missing.md'), self.work, latin,
                   link, fifo, target):
      proc = self.run_tool('check', '--all', f'--readme={readme}', expect=2)
      self.assertIn(readme, proc.stderr)
    with open(target, encoding='utf-8') as f:
      self.assertEqual(f.read(), 'must not change\n')
    with open(latin, 'rb') as f:
      self.assertEqual(f.read(), b'caf\xe9\n')

  def test_readme_is_rewritten_atomically(self):
    for v in self.manifest.served_versions():
      try:
        wheels.pristine_wheel(v, download=False)
      except Exception:  # pylint: disable=broad-except
        self.skipTest(f'the released wheel of jax {v} is not cached')
    readme = os.path.join(self.work, 'compatibility.md')
    with open(readme, 'w', encoding='utf-8') as f:
      f.write(f'# x\n\n{compat.BEGIN}\nold\n{compat.END}\n\nafter\n')
    os.chmod(readme, 0o640)
    before = os.stat(readme)
    proc = self.run_tool('check', '--all', f'--readme={readme}',
                         expect=None)
    self.assertIn(proc.returncode, (0, 4), proc.stderr)
    after = os.stat(readme)
    self.assertNotEqual(after.st_ino, before.st_ino)  # A new file, renamed.
    self.assertEqual(stat.S_IMODE(after.st_mode), 0o640)
    with open(readme, encoding='utf-8') as f:
      text = f.read()
    self.assertNotIn('\nold\n', text)
    self.assertTrue(text.startswith('# x\n') and text.endswith('\nafter\n'))
    self.assertEqual([n for n in os.listdir(self.work)
                      if n.startswith('.jax-interpret-patches-')], [])

  # d: a wheel whose member data is corrupt.

  def test_corrupt_member_data_in_wheel_dir_exits_5(self):
    wheel_dir = os.path.join(self.work, 'wheels')
    os.makedirs(wheel_dir)
    wheel = os.path.join(wheel_dir, os.path.basename(self.wheel))
    shutil.copyfile(self.wheel, wheel)
    victim = self.released[-1]
    with zipfile.ZipFile(wheel) as zf:
      info = zf.getinfo(victim)
    self.assertEqual(info.compress_type, zipfile.ZIP_DEFLATED)
    with open(wheel, 'r+b') as f:
      f.seek(info.header_offset)
      header = f.read(30)
      start = (info.header_offset + 30 + int.from_bytes(header[26:28], 'little')
               + int.from_bytes(header[28:30], 'little'))
      f.seek(start)
      # Deflate block type 3, which does not exist: zlib.error. The central
      # directory stays intact.
      f.write(b'\xff')
    with open(self.venv.path(victim), 'ab') as f:
      f.write(b'# locally modified\n')  # No backup: --force needs the wheel.
    modified = self.hashes()
    cache = os.path.join(self.work, 'cache')
    proc = self.run_tool('apply', '--force', f'--wheel_dir={wheel_dir}',
                         env=self.env(JAX_INTERPRET_PATCHES_CACHE=cache),
                         expect=5)
    self.assertIn(wheel, proc.stderr)
    self.assertEqual(self.hashes(), modified)

  # e: flag values.

  def test_lock_timeout_that_is_not_a_finite_number_is_a_usage_error(self):
    for value in ('nan', 'inf', '-1'):
      proc = self.run_tool('apply', f'--lock_timeout={value}', expect=2)
      self.assertIn('--lock_timeout', proc.stderr)
    self.assertPristine()

  def test_absl_help_flags_exit_0(self):
    for flag in ('--helpxml', '--help=true'):
      self.run_tool('status', flag, expect=0)

  # h: a venv path near PATH_MAX.

  def test_venv_path_near_path_max_exits_5(self):
    root = venv_util.make('migration-long-', self.wheel, with_pip=False).root
    self.addCleanup(shutil.rmtree, root, ignore_errors=True)
    long = os.path.join(root, 'L')
    while len(long) < 3980 - len('/venv') - 201:
      long = os.path.join(long, 'd' * 200)
    long = os.path.join(long, 'e' * (3980 - len('/venv') - len(long) - 1))
    os.makedirs(long)
    venv = os.path.join(long, 'venv')
    os.rename(os.path.join(root, 'venv'), venv)
    python = os.path.join(venv, 'bin', 'python')
    for args, py in ((('status',), python), (('apply',), python),
                     (('status', f'--python={python}'), self.venv.python)):
      proc = self.run_tool(*args, python=py, expect=5)
      self.assertIn('File name too long', proc.stderr)
    site = subprocess.run(
        [python, '-c', 'import sysconfig; '
         'print(sysconfig.get_paths()["purelib"])'], check=True,
        capture_output=True, text=True).stdout.strip()
    fd = os.open(site, os.O_RDONLY | os.O_DIRECTORY)  # Under PATH_MAX.
    try:
      self.assertEqual({p: _sha(p, fd) for p in self.files},
                       self.pristine_sha)
    finally:
      os.close(fd)

  # i: a malformed test hook.

  def test_malformed_signal_hook_is_ignored(self):
    env = self.env(**{transaction.SIGNAL_ENV: 'probed:abc'})
    self.run_tool('apply', env=env)
    self.assertPatched()

  # j: a FIFO or a link to /dev/zero in place of a target file.

  def test_fifo_target_never_blocks(self):
    fifo = self.released[-1]
    os.remove(self.venv.path(fifo))
    os.mkfifo(self.venv.path(fifo))
    data = json.loads(self.run_tool('status', '--json').stdout)
    self.assertEqual(data['state'], 'locally modified')
    self.assertEqual({f['path']: f['state'] for f in data['files']}[fifo],
                     'locally modified')
    for args in (('apply', '--force'), ('apply',), ('revert',)):
      self.run_tool(*args, expect=4)
    self.assertEqual(self.hashes(), {**self.pristine_sha, fifo: 'special'})
    self.assertTrue(stat.S_ISFIFO(os.lstat(self.venv.path(fifo)).st_mode))

  def test_fifo_target_never_blocks_the_recovery(self):
    # A run killed after its journal is written, then a FIFO in place of a
    # file: the next run hashes the files (fsutil.sha256_nofollow).
    env = self.env(**{transaction.KILL_ENV: 'journal-commit'})
    self.run_tool('apply', env=env, expect=-9)
    fifo = self.released[-1]
    os.remove(self.venv.path(fifo))
    os.mkfifo(self.venv.path(fifo))
    self.run_tool('apply', expect=4)
    self.assertEqual(self.hashes(), {**self.pristine_sha, fifo: 'special'})

  def test_link_to_dev_zero_is_not_read(self):
    target = self.released[-1]
    os.remove(self.venv.path(target))
    os.symlink('/dev/zero', self.venv.path(target))
    data = json.loads(self.run_tool('status', '--json').stdout)
    self.assertEqual(data['state'], 'locally modified')
    proc = self.run_tool('apply', '--force', expect=None)
    self.assertIn(proc.returncode, (4, 5), proc.stderr)
    self.assertEqual(self.hashes(), {**self.pristine_sha, target: 'special'})
    self.assertEqual(os.readlink(self.venv.path(target)), '/dev/zero')

  # F12: flags the command does not take.

  def test_flags_the_command_does_not_take_are_usage_errors(self):
    for args, flag in ((('apply', '--version=../../x'), '--version'),
                       (('revert', '--version=../../x'), '--version'),
                       (('apply', '--all'), '--all'),
                       (('status', '--force'), '--force'),
                       (('status', '--lock_timeout=3'), '--lock_timeout'),
                       (('check', '--output_dir=x'), '--output_dir')):
      proc = self.run_tool(*args, expect=2)
      self.assertIn(flag, proc.stderr)
      self.assertIn('only for', proc.stderr)
    self.assertPristine()

  def test_dash_o_without_a_folder_is_a_usage_error(self):
    proc = self.run_tool('wheel', '-o', expect=2)
    self.assertIn('output_dir', proc.stderr)
    self.assertEqual(os.listdir(self.work), [])


class ProbeReportTest(absltest.TestCase):

  def test_nul_byte_in_a_reported_path_is_an_environment_problem(self):
    from migration import environment  # pylint: disable=g-import-not-at-top
    from migration import errors  # pylint: disable=g-import-not-at-top
    report = {'python': '3.12.1', 'executable': '/x/bin/python',
              'purelib': '/x/lib\0/site-packages', 'jax': None,
              'jaxlib': None, 'site_packages': None, 'record': {}}
    with self.assertRaisesRegex(errors.EnvironmentProblem, 'NUL byte'):
      # pylint: disable-next=protected-access
      environment._check_report(report, '/x/bin/python')


if __name__ == '__main__':
  absltest.main()
