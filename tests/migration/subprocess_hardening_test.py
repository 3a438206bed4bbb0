"""The tool's subprocesses: what they run, what they read, how they fail.

Red-team findings F7 to F12 (git, pip, ``python -m wheel`` and the probe of
``--python``): a relative or bare ``--python``; a user's git attributes
file; a ``wheel.py`` or ``pip.py`` in the current directory; a file size
limit (``ulimit -f``); a C locale with a cache path that is not ASCII; a
wheel under the released wheel's name that is not the released one; the
``-o`` folders of a failed ``wheel``. Outcomes are checked by the sha256 of
the target files (in the venv, or in a built wheel) against
patches/manifest.json, never by the tool's own report. Nothing needs the
network: pip "downloads" from the folder of the released wheel
(``PIP_NO_INDEX``, ``PIP_FIND_LINKS``).
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import zipfile

from absl.testing import absltest
import venv_util

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from migration import manifest as manifest_lib  # noqa: E402
from migration import wheels  # noqa: E402

PATCHES = os.path.join(REPO, 'patches')
VERSION = os.environ.get('JAX_INTERPRET_PATCHES_TEST_VERSION', '0.12.0.1')

# Writes a marker (its own name) into the folder named by $MARKERS: a module
# of the current directory that must never run in place of pip or wheel.
_SHADOW = ('import os, sys\n'
           'name = os.path.basename(__file__)\n'
           'open(os.path.join(os.environ["MARKERS"], name), "w").write(\n'
           '    repr(sys.argv))\n')


def _sha(data: bytes) -> str:
  return hashlib.sha256(data).hexdigest()


def _rebuilt_wheel(wheel: str, dest: str) -> None:
  """Writes a copy of ``wheel`` with jax/__init__.py changed, one more
  module, and a RECORD that matches: a wheel that is not the released one.
  """
  def change(tmp: str, names: list[str]) -> None:
    with open(os.path.join(tmp, 'jax', '__init__.py'), 'ab') as f:
      f.write(b'\nprint("NOT THE RELEASED JAX")\n')
    with open(os.path.join(tmp, 'jax', 'not_released.py'), 'wb') as f:
      f.write(b'print("NOT THE RELEASED JAX")\n')
    names.append('jax/not_released.py')

  venv_util.rebuilt_wheel(wheel, dest, change)


class SubprocessHardeningTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.manifest = manifest_lib.load(PATCHES)
    if VERSION != cls.manifest.served_versions()[-1]:
      raise absltest.SkipTest(
          'the fault suites run once, for the newest served release')
    series = cls.manifest.series_for(VERSION)
    cls.files = list(series.files)
    cls.wheel = wheels.pristine_wheel(VERSION)
    cls.wheel_dir = os.path.dirname(cls.wheel)
    cls.wheel_sha = cls.manifest.wheel_sha256(VERSION)
    assert wheels.sha256_file(cls.wheel) == cls.wheel_sha, cls.wheel
    with zipfile.ZipFile(cls.wheel) as zf:
      cls.released_init = _sha(zf.read('jax/__init__.py'))
    cls.venv = venv_util.make('migration-subprocess-', cls.wheel,
                              with_pip=False)
    cls.root = cls.venv.root
    # The expected ends, computed independently of the tool.
    ends = venv_util.expected_ends(
        cls.venv, cls.wheel, VERSION, cls.files,
        [p.path for p in series.to_apply(VERSION)])
    cls.pristine = ends.pristine
    cls.pristine_sha, cls.patched_sha = ends.pristine_sha, ends.patched_sha
    patched = ends.patched
    # A file size limit that the released files fit and a patched one
    # does not.
    cls.largest = (max(len(d) for d in cls.pristine.values() if d),
                   max(map(len, patched.values())))

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root, ignore_errors=True)
    super().tearDownClass()

  def setUp(self):
    super().setUp()
    self.venv.restore(self.pristine)
    self.work = os.path.join(self.root, 'work')
    shutil.rmtree(self.work, ignore_errors=True)
    for d in ('tmp', 'home', 'cwd', 'markers'):
      os.makedirs(os.path.join(self.work, d))
    self.cwd = os.path.join(self.work, 'cwd')
    self.markers = os.path.join(self.work, 'markers')

  def env(self, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(('JAX_INTERPRET_PATCHES_', 'GIT_', 'PIP_'))
           and k not in ('XDG_CONFIG_HOME', 'XDG_CACHE_HOME')}
    home = os.path.join(self.work, 'home')
    env.update(PYTHONPATH=os.pathsep.join([REPO, self.venv.deps]),
               PYTHONDONTWRITEBYTECODE='1', HOME=home, MARKERS=self.markers,
               TMPDIR=os.path.join(self.work, 'tmp'),
               JAX_INTERPRET_PATCHES_CACHE=os.path.join(home, 'cache'),
               JAX_INTERPRET_PATCHES_WHEEL_DIRS=self.wheel_dir)
    env.update(extra)
    return env

  def offline_pip_env(self, cache: str, **extra: str) -> dict[str, str]:
    """No wheel folder, an empty cache: the wheel is "downloaded" by pip."""
    env = self.env(**{'JAX_INTERPRET_PATCHES_CACHE': cache,
                      'PIP_NO_INDEX': '1', 'PIP_FIND_LINKS': self.wheel_dir,
                      'PIP_DISABLE_PIP_VERSION_CHECK': '1', **extra})
    del env['JAX_INTERPRET_PATCHES_WHEEL_DIRS']
    return env

  def run_tool(self, *args: str, expect: int = 0, python: str | None = None,
               env: dict[str, str] | None = None, cwd: str | None = None,
               preexec_fn=None) -> subprocess.CompletedProcess[str]:
    """Runs the tool; checks the exit code and that there is no traceback."""
    proc = subprocess.run(
        [python or self.venv.python, '-m', 'migration', *args],
        cwd=cwd or self.cwd, env=env or self.env(), capture_output=True,
        text=True, errors='replace', check=False, preexec_fn=preexec_fn)
    self.assertEqual(proc.returncode, expect,
                     f'{args}\nstdout:\n{proc.stdout}\nstderr:\n'
                     f'{proc.stderr}')
    self.assertNotIn('Traceback', proc.stderr + proc.stdout)
    return proc

  def hashes(self) -> dict[str, str | None]:
    return {f: manifest_lib.sha256_path(self.venv.path(f))
            for f in self.files}

  def wheel_hashes(self, wheel: str) -> dict[str, str]:
    with zipfile.ZipFile(wheel) as zf:
      return {f: _sha(zf.read(f)) for f in [*self.files, 'jax/__init__.py']}

  def assertBuilt(self, out: str) -> None:
    """``out`` holds just the patched wheel, built from the released one."""
    (name,) = os.listdir(out)
    self.assertEqual(self.wheel_hashes(os.path.join(out, name)),
                     {**self.patched_sha,
                      'jax/__init__.py': self.released_init})

  def assertNoMarkers(self) -> None:
    self.assertEqual(os.listdir(self.markers), [])

  # F7: --python is made absolute against the current directory.

  def test_relative_python_is_taken_against_the_current_directory(self):
    # The tool runs in this test's Python; the target is the venv, named by
    # a path relative to its parent folder.
    self.run_tool('apply', '--python=venv/bin/python', python=sys.executable,
                  cwd=self.root)
    self.assertEqual(self.hashes(), self.patched_sha)
    # A bare name, in the venv's bin folder: that venv's python, not the
    # one of PATH (here a script that leaves a marker and fails).
    path_dir = os.path.join(self.work, 'path')
    os.makedirs(path_dir)
    with open(os.path.join(path_dir, 'python'), 'w', encoding='utf-8') as f:
      f.write(f'#!/bin/sh\ntouch {self.markers}/path-python\nexit 1\n')
    os.chmod(os.path.join(path_dir, 'python'), 0o755)
    env = self.env(PATH=os.pathsep.join([path_dir, os.environ['PATH']]))
    self.run_tool('revert', '--python=python', python=sys.executable,
                  env=env, cwd=os.path.dirname(self.venv.python))
    self.assertEqual(self.hashes(), self.pristine_sha)
    self.assertNoMarkers()

  def test_status_with_a_relative_python(self):
    # A new user's `status --python venv-wheel/bin/python` (exit 5, "Cannot
    # run venv-wheel/bin/python ... No such file or directory", when the
    # path was run as given from the probe's folder, /), and with `..`.
    for cwd, python in ((self.root, 'venv/bin/python'),
                        (self.cwd, '../../venv/bin/python')):
      with self.subTest(python):
        proc = self.run_tool('status', '--json', f'--python={python}',
                             python=sys.executable, cwd=cwd)
        report = json.loads(proc.stdout)
        self.assertEqual(report['state'], 'pristine')
        self.assertEqual(report['environment']['jax'], VERSION)
        self.assertEqual(report['environment']['python_executable'],
                         self.venv.python)

  # F8: the user's git attributes file is not read.

  def test_user_git_attributes_are_ignored(self):
    home = os.path.join(self.work, 'home')
    xdg = os.path.join(self.work, 'xdg')
    for i, (name, attributes, extra) in enumerate((
        ('~/.config/git/attributes',
         os.path.join(home, '.config', 'git', 'attributes'), {}),
        ('$XDG_CONFIG_HOME/git/attributes',
         os.path.join(xdg, 'git', 'attributes'), {'XDG_CONFIG_HOME': xdg}))):
      with self.subTest(name):
        os.makedirs(os.path.dirname(attributes))
        with open(attributes, 'w', encoding='utf-8') as f:
          f.write('* text eol=crlf\n')
        env = self.env(**extra)
        self.run_tool('apply', env=env)
        self.assertEqual(self.hashes(), self.patched_sha)
        self.run_tool('revert', env=env)
        self.assertEqual(self.hashes(), self.pristine_sha)
        out = os.path.join(self.work, f'out{i}')
        self.run_tool('wheel', f'--version={VERSION}', '-o', out, env=env,
                      python=sys.executable)
        self.assertBuilt(out)
        os.remove(attributes)

  # F9: pip and wheel run isolated, not in the current directory.

  def test_pip_and_wheel_of_the_current_directory_are_not_run(self):
    for name in ('pip.py', 'wheel.py'):
      with open(os.path.join(self.cwd, name), 'w', encoding='utf-8') as f:
        f.write(_SHADOW)
    # wheel, with the released wheel to download first: pip, then wheel.
    cache = os.path.join(self.work, 'cache1')
    out = os.path.join(self.work, 'out')
    self.run_tool('wheel', f'--version={VERSION}', '-o', out,
                  env=self.offline_pip_env(cache), python=sys.executable)
    self.assertNoMarkers()
    self.assertBuilt(out)
    self.assertEqual(wheels.sha256_file(os.path.join(
        cache, 'wheels', os.path.basename(self.wheel))), self.wheel_sha)
    # check, with an empty cache: pip.
    cache = os.path.join(self.work, 'cache2')
    self.run_tool('check', f'--version={VERSION}',
                  env=self.offline_pip_env(cache), python=sys.executable)
    self.assertNoMarkers()
    self.assertEqual(wheels.sha256_file(os.path.join(
        cache, 'wheels', os.path.basename(self.wheel))), self.wheel_sha)

  # F10: a git killed by SIGXFSZ is an environment problem, not a conflict.

  def test_file_size_limit_is_not_a_conflict(self):
    pristine, patched = self.largest
    if patched <= pristine:
      self.skipTest('no patched file is larger than every released one')
    limit = (pristine + patched) // 2

    def limit_file_size():
      resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    proc = self.run_tool('apply', expect=5, preexec_fn=limit_file_size)
    self.assertIn('SIGXFSZ', proc.stderr)
    self.assertNotIn('conflict', proc.stderr.lower())
    self.assertEqual(self.hashes(), self.pristine_sha)
    proc = self.run_tool('check', f'--version={VERSION}', expect=5,
                         preexec_fn=limit_file_size)
    output = (proc.stdout + proc.stderr).lower()
    self.assertIn('sigxfsz', output)
    self.assertNotIn('conflict', output)
    self.assertNotIn('upstream', output)
    self.assertEqual(self.hashes(), self.pristine_sha)

  # F11 g: pip's output in a C locale, with a cache path that is not ASCII.

  def test_c_locale_and_paths_that_are_not_ascii(self):
    cache = os.path.join(self.work, 'cach\u00e8')
    # pip names the folder it finds the wheel in ("Looking in links: ...").
    links = os.path.join(self.work, 'whe\u00e8ls')
    os.makedirs(links)
    os.symlink(self.wheel, os.path.join(links, os.path.basename(self.wheel)))
    env = self.offline_pip_env(cache, PYTHONUTF8='0', LC_ALL='C', LANG='C',
                               PIP_FIND_LINKS=links)
    self.run_tool('check', f'--version={VERSION}', env=env,
                  python=sys.executable)
    self.assertEqual(wheels.sha256_file(os.path.join(
        cache, 'wheels', os.path.basename(self.wheel))), self.wheel_sha)

  # F12: the released wheel's sha256; the -o folders of a failed run.

  def test_wheel_that_is_not_the_released_one_is_refused(self):
    wheel_dir = os.path.join(self.work, 'wd')
    os.makedirs(wheel_dir)
    fake = os.path.join(wheel_dir, os.path.basename(self.wheel))
    _rebuilt_wheel(self.wheel, fake)
    # Its target files are the released ones: only the sha256 tells.
    self.assertEqual(
        {f: None if d is None else _sha(d)
         for f, d in venv_util.released_files(fake, self.files).items()},
        self.pristine_sha)
    out = os.path.join(self.work, 'out')
    env = self.env()
    del env['JAX_INTERPRET_PATCHES_WHEEL_DIRS']
    proc = self.run_tool('wheel', f'--version={VERSION}', '-o', out,
                         f'--wheel_dir={wheel_dir}', expect=5, env=env,
                         python=sys.executable)
    for text in (fake, wheels.sha256_file(fake), self.wheel_sha):
      self.assertIn(text, proc.stderr)
    self.assertFalse(os.path.exists(out))

  def test_cached_wheel_that_is_not_the_released_one_is_downloaded_again(
      self):
    cache = os.path.join(self.work, 'cache')
    cached = os.path.join(cache, 'wheels', os.path.basename(self.wheel))
    os.makedirs(os.path.dirname(cached))
    _rebuilt_wheel(self.wheel, cached)
    out = os.path.join(self.work, 'out')
    self.run_tool('wheel', f'--version={VERSION}', '-o', out,
                  env=self.offline_pip_env(cache), python=sys.executable)
    self.assertEqual(wheels.sha256_file(cached), self.wheel_sha)
    self.assertBuilt(out)

  def test_failed_wheel_removes_the_output_folders_it_made(self):
    # The venv's Python has no `wheel` package: exit 5 once -o is made.
    existing = os.path.join(self.work, 'existing')
    os.makedirs(existing)
    proc = self.run_tool('wheel', f'--version={VERSION}', '-o',
                         'existing/x/y', expect=5, cwd=self.work)
    self.assertIn('pip install wheel', proc.stderr)
    self.assertEqual(os.listdir(existing), [])


if __name__ == '__main__':
  absltest.main()
