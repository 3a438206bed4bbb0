"""A venv with a released jax wheel installed, for the migration tool's tests.

The tool never imports jax, so only the jax wheel is installed (``--no-deps``,
``--ignore-requires-python``: the tests run on Pythons older than jax
needs). The tool runs in the venv's Python with ``PYTHONPATH`` set to the
repository root and ``JaxVenv.deps``, which exposes only absl and filelock
of the running Python.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from typing import TYPE_CHECKING
import zipfile

import absl
import filelock

if TYPE_CHECKING:
  from migration import manifest as manifest_lib

# A module jax does not ship, and its content: what
# ``series_adding_a_module``'s last patch adds.
ADDED_MODULE = ('jax/_src/pallas/mosaic/interpret/added_module.py',
                b'"""A module the series adds."""\nVALUE = 1\n')


@dataclasses.dataclass(frozen=True)
class JaxVenv:
  """A venv made by ``make``, all of it under ``root``.

  Attributes:
    root: the temporary directory holding it; remove it when done.
    python: the venv's Python.
    site: its site-packages (purelib), where jax is installed.
    state_root: the tool's state root for it, beside site-packages.
    state_dir: the state folder of its install in the root (see
      ``migration/statedir.py``): lock, journal, record, backup.
    deps: the directory to put on ``PYTHONPATH`` for absl and filelock.
  """
  root: str
  python: str
  site: str
  state_root: str
  state_dir: str
  deps: str

  def path(self, relpath: str) -> str:
    """The path of ``relpath`` (``/``-separated) under site-packages."""
    return os.path.join(self.site, *relpath.split('/'))

  def restore(self, files: dict[str, bytes | None]) -> None:
    """Puts jax back as a test starts from it.

    Writes ``files`` (relpath -> content; a link at a path is replaced, not
    followed; None: the release has no such file, which is removed), removes
    the tool's state directory, and compiles bytecode in the files'
    directories as an import leaves it (errors ignored: jax may need a newer
    Python than the venv's, which the tool never imports it with).

    Args:
      files: the released content of the tool's target files.
    """
    for relpath, data in files.items():
      with contextlib.suppress(FileNotFoundError):
        os.remove(self.path(relpath))
      if data is None:
        continue
      with open(self.path(relpath), 'wb') as f:
        f.write(data)
    shutil.rmtree(self.state_root, ignore_errors=True)
    subprocess.run([self.python, '-m', 'compileall', '-q',
                    *sorted({os.path.dirname(self.path(p)) for p in files})],
                   capture_output=True, check=False)


def make(prefix: str, wheel: str, with_pip: bool) -> JaxVenv:
  """Makes a venv in a new temporary directory and installs ``wheel``.

  Args:
    prefix: the start of the temporary directory's name.
    wheel: the path of a jax wheel.
    with_pip: whether the venv gets pip, which then installs the wheel; else
      the running Python's pip installs it (``--target``) into the venv's
      site-packages.

  Returns:
    The venv.

  Raises:
    subprocess.CalledProcessError: the venv or the install failed.
  """
  root = os.path.realpath(tempfile.mkdtemp(prefix=prefix))
  venv = os.path.join(root, 'venv')
  subprocess.run([sys.executable, '-m', 'venv',
                  *([] if with_pip else ['--without-pip']), venv], check=True)
  python = os.path.join(venv, 'bin', 'python')
  site = subprocess.run(
      [python, '-c', 'import sysconfig; '
       'print(sysconfig.get_paths()["purelib"])'],
      check=True, capture_output=True, text=True).stdout.strip()
  pip = [python, '-m', 'pip', 'install'] if with_pip else [
      sys.executable, '-m', 'pip', 'install', '--target', site, '--no-compile']
  subprocess.run([*pip, '-q', '--no-deps', '--disable-pip-version-check',
                  '--ignore-requires-python', wheel], check=True)
  deps = os.path.join(root, 'deps')
  os.makedirs(deps)
  for mod in (absl, filelock):
    src = os.path.dirname(mod.__file__)
    os.symlink(src, os.path.join(deps, os.path.basename(src)))
  state_root = os.path.join(os.path.dirname(site), '.jax-interpret-patches')
  return JaxVenv(root=root, python=python, site=site, state_root=state_root,
                 state_dir=install_state_dir(state_root, site), deps=deps)


def install_state_dir(state_root: str, site: str) -> str:
  """The state folder of the jax in ``site`` under ``state_root``: named by
  the sha256 of site-packages/jax, links resolved (computed here, not by the
  tool's code)."""
  jax = os.fsencode(os.path.realpath(os.path.join(site, 'jax')))
  return os.path.join(state_root, hashlib.sha256(jax).hexdigest()[:16])


@dataclasses.dataclass(frozen=True)
class Ends:
  """The two states a run may leave the target files in, found without the
  tool: pristine from jax's RECORD, patched by ``git apply`` of the series
  on the wheel's files.

  Attributes:
    pristine: relpath -> the released content (bytes), from the wheel; None
      for a module the series adds.
    pristine_sha: relpath -> sha256 hex digest, from jax's RECORD; None for
      a module the series adds.
    patched_sha: relpath -> sha256 hex digest of the patched file.
    patched: relpath -> the patched content (bytes).
  """
  pristine: dict[str, bytes | None]
  pristine_sha: dict[str, str | None]
  patched_sha: dict[str, str]
  patched: dict[str, bytes] = dataclasses.field(default_factory=dict)


def released_files(wheel: str, files) -> dict[str, bytes | None]:
  """The content of each of ``files`` in ``wheel``; None where it has none
  (a module the series adds)."""
  with zipfile.ZipFile(wheel) as zf:
    names = set(zf.namelist())
    return {p: zf.read(p) if p in names else None for p in files}


def expected_ends(venv: JaxVenv, wheel: str, version: str,
                  files: list[str], patches: list[str]) -> Ends:
  """The ``Ends`` of ``files`` of jax ``version`` installed in ``venv``.

  Args:
    venv: a venv of ``make`` with jax ``version`` from ``wheel``.
    wheel: the released jax wheel.
    version: its version.
    files: the target files (``/``-separated relpaths under site-packages).
    patches: the series' patch files that apply to ``version``, in order;
      applied with the user's and system git config and attributes
      ignored.
  """
  record = os.path.join(venv.site, f'jax-{version}.dist-info', 'RECORD')
  with open(record, encoding='utf-8') as f:
    rows = dict(line.split(',')[:2] for line in f.read().splitlines())
  pristine_sha: dict[str, str | None] = {}
  for p in files:
    if p not in rows:
      pristine_sha[p] = None
      continue
    value = rows[p].split('=', 1)[1]
    pristine_sha[p] = base64.urlsafe_b64decode(
        value + '=' * (-len(value) % 4)).hex()
  pristine = released_files(wheel, files)
  work = tempfile.mkdtemp(prefix='expected-', dir=venv.root)
  try:
    for p, data in pristine.items():
      if data is None:
        continue
      os.makedirs(os.path.dirname(os.path.join(work, p)), exist_ok=True)
      with open(os.path.join(work, p), 'wb') as f:
        f.write(data)
    for patch in patches:
      subprocess.run(['git', '-c', 'core.autocrlf=false', '-c',
                      f'core.attributesFile={os.devnull}', 'apply', '-p1',
                      patch], cwd=work, check=True,
                     env=dict(os.environ, GIT_CONFIG_NOSYSTEM='1',
                              GIT_ATTR_NOSYSTEM='1',
                              GIT_CONFIG_GLOBAL=os.devnull))
    patched = {}
    for p in files:
      with open(os.path.join(work, p), 'rb') as f:
        patched[p] = f.read()
  finally:
    shutil.rmtree(work)
  return Ends(pristine, pristine_sha,
              {p: hashlib.sha256(d).hexdigest() for p, d in patched.items()},
              patched)


def rebuilt_wheel(wheel: str, dest: str, change) -> None:
  """Writes a copy of ``wheel`` to ``dest``, changed, with a RECORD that
  matches its files (as a wheel built from the changed tree would have).

  Args:
    wheel: a jax wheel.
    dest: the new wheel's path.
    change: called with the folder the wheel is unpacked in and its list of
      member names; changes the files there (a new file's name is appended
      to the list).
  """
  with tempfile.TemporaryDirectory() as tmp:
    with zipfile.ZipFile(wheel) as zf:
      zf.extractall(tmp)
      names = zf.namelist()
    change(tmp, names)
    record = next(n for n in names if n.endswith('.dist-info/RECORD'))
    rows = []
    for n in names:
      if n == record:
        rows.append(f'{n},,')
        continue
      with open(os.path.join(tmp, n), 'rb') as f:
        data = f.read()
      digest = base64.urlsafe_b64encode(
          hashlib.sha256(data).digest()).rstrip(b'=').decode()
      rows.append(f'{n},sha256={digest},{len(data)}')
    with open(os.path.join(tmp, record), 'w', encoding='utf-8') as f:
      f.write('\n'.join(rows) + '\n')
    with zipfile.ZipFile(dest, 'w', zipfile.ZIP_DEFLATED) as out:
      for n in names:
        out.write(os.path.join(tmp, n), n)


def series_adding_a_module(patches: str, series: manifest_lib.Series,
                           version: str) -> None:
  """Makes ``patches`` a patches folder serving ``version`` with ``series``
  and a last patch that adds ``ADDED_MODULE``, and generates its manifest.

  The repository root must be on ``sys.path`` (for ``jax_fork``).
  """
  from jax_fork import manifest_gen
  from migration import manifest as manifest_lib
  shutil.rmtree(patches, ignore_errors=True)
  directory = os.path.join(patches, series.name)
  shutil.copytree(series.directory, directory)
  path, content = ADDED_MODULE
  lines = content.decode().splitlines()
  name = f'{len(series.patches) + 1:04d}-Add-a-module.patch'
  with open(os.path.join(directory, name), 'w', encoding='utf-8') as f:
    f.write('From 0000000000000000000000000000000000000000 Mon Sep 17 '
            '00:00:00 2001\nFrom: Test <test@example.com>\n'
            'Subject: [PATCH] Add a module.\n\n---\n'
            f'diff --git a/{path} b/{path}\nnew file mode 100644\n'
            f'--- /dev/null\n+++ b/{path}\n@@ -0,0 +1,{len(lines)} @@\n'
            + ''.join(f'+{line}\n' for line in lines) + '--\n2.43.0\n\n')
  with open(os.path.join(directory, manifest_lib.SERIES), 'a',
            encoding='utf-8') as f:
    f.write(name + '\n')
  manifest_gen.generate(patches, serve={series.name: [version]})
