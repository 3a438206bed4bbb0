"""Build a patched jax wheel from the released one.

The released wheel (checked against the manifest's ``wheel_sha256``) is
unpacked and repacked with the ``wheel`` package (``python -I -m wheel
unpack`` / ``pack``, run isolated in the scratch folder: no ``wheel.py`` of
the current directory runs in its place); in between, the series is applied
and verified against the manifest, and the version gets the PEP 440 local
label ``+interpret.N`` (N = this project's release): the dist-info folder is
renamed and METADATA's ``Version`` rewritten; ``pack`` regenerates RECORD
with the new hashes. ``jax/version.py`` is left alone, so jax still reports
(and pairs with jaxlib as) the upstream version. A failed build leaves
nothing behind: no wheel, and none of the ``-o`` folders it created.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.util
import io
import os
import re
import subprocess
import sys
import zipfile

from absl import logging

from migration import errors
from migration import fsutil
from migration import gitapply
from migration import interrupt
from migration import manifest as manifest_lib
from migration import wheels


def label(release: int) -> str:
  """Returns the local version label of release ``release``."""
  return f'interpret.{release}'


def _wheel_tool(args: list[str], cwd: str) -> None:
  """Runs ``python -I -m wheel ARGS`` in ``cwd``.

  Isolated (``-I``: no ``PYTHON*`` variable, no user site) and in ``cwd``
  (the build's scratch folder; the paths in ``args`` are absolute), so
  that no ``wheel.py`` of the current directory or of ``PYTHONPATH`` runs
  in its place. Its output is decoded as UTF-8 whatever the locale.
  """
  if importlib.util.find_spec('wheel') is None:
    raise errors.EnvironmentProblem(
        'Building a wheel needs the `wheel` package in this Python '
        f'({sys.executable}): pip install wheel')
  # A fixed timestamp for the zip entries: the same inputs give the same
  # wheel, byte for byte.
  env = dict(os.environ)
  env.setdefault('SOURCE_DATE_EPOCH', '946684800')
  proc = subprocess.run([sys.executable, '-I', '-m', 'wheel', *args],
                        cwd=cwd, env=env, capture_output=True,
                        encoding='utf-8', errors='replace', check=False)
  if 'No module named wheel' in proc.stderr:  # Only on PYTHONPATH, say.
    raise errors.EnvironmentProblem(
        'Building a wheel needs the `wheel` package installed in this '
        f'Python ({sys.executable}), not only on PYTHONPATH or in the user '
        'site (python -I runs it): pip install wheel')
  if proc.returncode != 0:
    raise errors.EnvironmentProblem(
        f'python -m wheel {args[0]} failed:\n{proc.stderr.strip()}')


def _set_version(metadata: str, old: str, new: str) -> None:
  """Rewrites the ``Version:`` header of a METADATA file in place."""
  with open(metadata, 'rb') as f:
    data = f.read()
  head, sep, body = data.partition(b'\n\n')
  head, count = re.subn(rb'^Version: ' + re.escape(old.encode()) + rb'$',
                        b'Version: ' + new.encode(), head, count=1,
                        flags=re.MULTILINE)
  if count != 1:
    raise errors.PatchDataError(f'{metadata} has no "Version: {old}" line.')
  with open(metadata, 'wb') as f:
    f.write(head + sep + body)


def verify_record(wheel: str) -> None:
  """Checks every RECORD hash and size of ``wheel``.

  Raises:
    PatchDataError: an entry is missing or its hash or size is wrong.
  """
  with zipfile.ZipFile(wheel) as zf:
    names = set(zf.namelist())
    record = next(n for n in names if n.endswith('.dist-info/RECORD'))
    rows = list(csv.reader(io.StringIO(zf.read(record).decode())))
    listed = set()
    for row in rows:
      if not row:
        continue
      path, digest, size = row
      listed.add(path)
      if path == record:
        continue
      data = zf.read(path)
      algo, _, value = digest.partition('=')
      want = base64.urlsafe_b64encode(
          hashlib.new(algo, data).digest()).rstrip(b'=').decode()
      if value != want or int(size) != len(data):
        raise errors.PatchDataError(f'{wheel}: RECORD is wrong for {path}.')
    unlisted = {n for n in names if not n.endswith('/')} - listed
    if unlisted:
      raise errors.PatchDataError(
          f'{wheel}: RECORD does not list {sorted(unlisted)[:3]}.')


def build(manifest: manifest_lib.Manifest, version: str, out_dir: str,
          wheel_dirs: tuple[str, ...] = ()) -> str:
  """Builds ``jax-VERSION+interpret.N-py3-none-any.whl`` into ``out_dir``.

  Args:
    manifest: the loaded manifest (its release is N).
    version: a jax version the manifest serves.
    out_dir: where to write the wheel (created if needed; on a failure,
      the folders this call created are removed again).
    wheel_dirs: directories searched for the released wheel before the
      cache.

  Returns:
    The path of the patched wheel.

  Raises:
    UnsupportedError: ``version`` is not served.
    PatchDataError: the series does not give the manifest's hashes.
    EnvironmentProblem: git or the ``wheel`` package is missing, the
      released wheel cannot be fetched or is not the one the manifest
      names (its ``wheel_sha256``), or ``out_dir`` cannot take the wheel
      (not a directory, read-only, immutable, full, a directory at the
      wheel's name).
  """
  series = manifest.series_for(version)
  if series is None:
    raise errors.UnsupportedError(manifest.not_served_message(version))
  gitapply.git_executable()
  pristine = os.path.abspath(wheels.pristine_wheel(
      version, wheel_dirs, sha256=manifest.wheel_sha256(version)))
  created: list[str] = []
  try:
    return _build(manifest, series, version, pristine, out_dir, created)
  except BaseException:
    _remove_dirs(created)
    raise


def _make_dirs(path: str, created: list[str]) -> None:
  """Makes folder ``path`` and its missing parents, as ``os.makedirs``.

  Args:
    path: the folder.
    created: gets the folders this call made, parents first.

  Raises:
    OSError: a folder cannot be made, or ``path`` is not a folder.
  """
  missing = []
  p = path
  while p and not os.path.lexists(p):
    missing.append(p)
    p = os.path.dirname(p)
  for d in reversed(missing):
    try:
      os.mkdir(d)
    except FileExistsError:  # Made since, or d is a parent's `..`.
      continue
    created.append(d)
  os.makedirs(path, exist_ok=True)  # The error, if path is no folder.


def _remove_dirs(created: list[str]) -> None:
  """Removes the folders of ``_make_dirs`` that are still empty."""
  for d in reversed(created):
    try:
      os.rmdir(d)
    except OSError:  # Not empty (something else was put there), or gone.
      pass


def _build(manifest: manifest_lib.Manifest, series: manifest_lib.Series,
           version: str, pristine: str, out_dir: str,
           created: list[str]) -> str:
  """``build``'s work from the released wheel ``pristine`` (absolute).

  Args:
    manifest: as ``build``'s.
    series: the series serving ``version``.
    version: as ``build``'s.
    pristine: the released wheel.
    out_dir: as ``build``'s.
    created: gets the folders of ``out_dir`` this call makes.

  Returns:
    The path of the patched wheel.
  """
  new_version = f'{version}+{label(manifest.release)}'
  expected = series.hashes[version]
  try:  # Fail before the build if out_dir cannot take a file at all.
    _make_dirs(out_dir, created)
    with interrupt.deferred():
      fsutil.remove(fsutil.write_temp(out_dir, b''))
  except OSError as e:
    raise _output_problem(out_dir, e) from e
  with fsutil.scratch('wheel') as tmp:
    tmp = os.path.abspath(tmp)
    _wheel_tool(['unpack', '-d', tmp, pristine], tmp)
    root = os.path.join(tmp, f'jax-{version}')

    def hashes() -> dict[str, str | None]:
      return {f: manifest_lib.sha256_path(os.path.join(root, *f.split('/')))
              for f in expected}

    if hashes() != {f: h[0] for f, h in expected.items()}:
      raise errors.PatchDataError(
          f'{pristine} does not hold the released files the manifest names.')
    for p in series.to_apply(version):
      logging.info('Applying %s', p.name)
      gitapply.apply(p.path, root)
    if hashes() != {f: h[-1] for f, h in expected.items()}:
      raise errors.PatchDataError(
          f'The patched files of jax {version} do not match the manifest.')
    old_info = os.path.join(root, f'jax-{version}.dist-info')
    new_info = os.path.join(root, f'jax-{new_version}.dist-info')
    os.rename(old_info, new_info)
    _set_version(os.path.join(new_info, 'METADATA'), version, new_version)
    os.remove(os.path.join(new_info, 'RECORD'))  # pack writes a new one.
    staging = os.path.join(tmp, 'out')
    os.makedirs(staging)
    _wheel_tool(['pack', '-d', staging, root], tmp)
    built = os.listdir(staging)
    if len(built) != 1:
      raise errors.MigrationError(f'wheel pack wrote {built}.')
    verify_record(os.path.join(staging, built[0]))
    return _write_out(os.path.join(staging, built[0]), out_dir)


def _write_out(built: str, out_dir: str) -> str:
  """Puts the wheel ``built`` into ``out_dir`` under its name, atomically.

  Its content goes to a new temporary file in ``out_dir`` (created
  exclusively under a fresh name, so a link planted at any name there is
  never followed), which is then renamed over ``out_dir/<its name>``. A
  failure leaves nothing behind; a signal waits until the wheel is there.

  Returns:
    The path of the wheel in ``out_dir``.

  Raises:
    EnvironmentProblem: ``out_dir`` is not a writable directory, is full,
      or has a directory at the wheel's name.
  """
  dest = os.path.join(out_dir, os.path.basename(built))
  mask = os.umask(0o022)  # Read it back: the wheel gets 0o666 & ~umask.
  os.umask(mask)
  try:
    with interrupt.deferred(), open(built, 'rb') as f:  # A signal waits.
      tmp = fsutil.write_temp(out_dir, f.read(), 0o666 & ~mask)
      try:
        os.replace(tmp, dest)
      except BaseException:
        fsutil.remove(tmp)
        raise
  except OSError as e:
    raise _output_problem(out_dir, e) from e
  return dest


def _output_problem(out_dir: str, e: OSError) -> errors.EnvironmentProblem:
  return errors.EnvironmentProblem(
      f'Cannot write the wheel into {out_dir}: {e}. Nothing was written '
      'there; pass -o a writable directory with room for the wheel.')
