"""Fetch and cache pristine jax wheels (the reference for pristine files).

A wheel found locally or downloaded is checked against the sha256 of the
released wheel where the caller passes it (the manifest's ``wheel_sha256``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import os
import re
import subprocess
import sys
import shutil
import tempfile
import zipfile
import zlib

from absl import logging

from migration import errors
from migration import trust


WHEEL_DIRS_ENV = 'JAX_INTERPRET_PATCHES_WHEEL_DIRS'


def cache_dir() -> str:
  """Returns the wheel cache directory.

  ``$JAX_INTERPRET_PATCHES_CACHE/wheels`` if that variable is set, otherwise
  ``$XDG_CACHE_HOME/jax-interpret-patches/wheels`` (``~/.cache`` by default,
  and in place of a relative ``XDG_CACHE_HOME``, which the XDG Base
  Directory specification says to ignore).
  """
  root = os.environ.get('JAX_INTERPRET_PATCHES_CACHE')
  if not root:
    xdg = os.environ.get('XDG_CACHE_HOME', '')
    if not os.path.isabs(xdg):  # Relative: invalid, ignored (XDG spec).
      xdg = os.path.expanduser('~/.cache')
    root = os.path.join(xdg, 'jax-interpret-patches')
  return os.path.join(root, 'wheels')


def wheel_name(version: str) -> str:
  return f'jax-{version}-py3-none-any.whl'


def sha256_file(path: str) -> str:
  h = hashlib.sha256()
  with open(path, 'rb') as f:
    for block in iter(lambda: f.read(1 << 20), b''):
      h.update(block)
  return h.hexdigest()


def env_wheel_dirs() -> tuple[str, ...]:
  """Returns the directories named by ``$JAX_INTERPRET_PATCHES_WHEEL_DIRS``.

  A list separated by ``os.pathsep`` of directories holding released jax
  wheels (e.g. for an offline machine); they are searched before the cache.
  """
  value = os.environ.get(WHEEL_DIRS_ENV, '')
  return tuple(d for d in value.split(os.pathsep) if d)


def check_version_number(version: str) -> str:
  """Returns ``version`` if it is a release number (``0.12.0.1``, ``0.8rc1``).

  Raises:
    UsageError: it is not (e.g. a path).
  """
  if not re.fullmatch(r'\d+(\.\d+)*((a|b|rc|\.post|\.dev)\d+)*', version):
    raise errors.UsageError(f'{version!r} is not a jax version number.')
  return version


def pristine_wheel(version: str, extra_dirs: tuple[str, ...] = (),
                   download: bool = True, sha256: str | None = None) -> str:
  """Returns the path of the released jax wheel of ``version``.

  Looks in ``extra_dirs``, then the directories of
  ``$JAX_INTERPRET_PATCHES_WHEEL_DIRS``, then the cache; otherwise downloads
  it from the package index with ``pip download --no-deps`` into the cache.
  With ``sha256`` (the manifest's ``wheel_sha256``), a wheel found or
  downloaded must have it: a same-named wheel that is not the released one
  (rebuilt, edited) is never used. A wheel in a folder that another user
  can change (``trust.untrusted``) is never used either: it could be
  swapped after its hash is checked.

  Args:
    version: the jax version, e.g. ``0.12.0``.
    extra_dirs: directories searched first.
    download: whether to run pip when the wheel is not found locally.
    sha256: the hex sha256 of the released wheel; None: not checked.

  Returns:
    Path of the wheel file.

  Raises:
    UsageError: ``version`` is not a version number.
    UnsupportedError: the package index has no such jax release.
    EnvironmentProblem: the wheel is not found and cannot be downloaded, or
      the one found is in a folder another user can change, or is not a
      readable zip or has another sha256 than
      ``sha256`` (a cached one is downloaded again instead), or the one
      downloaded has another sha256.
  """
  check_version_number(version)
  name = wheel_name(version)
  cache = cache_dir()
  extra_dirs = (*extra_dirs, *env_wheel_dirs())
  for d in (*extra_dirs, cache):
    candidate = os.path.join(d, name)
    if os.path.isfile(candidate):
      why = trust.untrusted(d)
      if why:  # It could be swapped after its hash is checked.
        raise errors.EnvironmentProblem(
            f'{candidate} is not used: {why}, so another user could swap it '
            'for another wheel after it is checked. Nothing was changed. '
            'Use a wheel folder (--wheel_dir, JAX_INTERPRET_PATCHES_CACHE) '
            'of your own.')
      problem = _not_released(candidate, sha256)
      if problem is None:
        return candidate
      if d != cache or not download:
        raise errors.EnvironmentProblem(
            f'{candidate} {problem}; remove it, or replace it with the '
            'released wheel.')
      logging.warning('Downloading %s again: the cached copy %s.', name,
                      problem)
      break
  if not download:
    raise errors.EnvironmentProblem(
        f'{name} not found in {", ".join((*extra_dirs, cache))}.')
  try:
    return _download(version, cache, sha256)
  except OSError as e:
    raise errors.EnvironmentProblem(
        f'Cannot download {name} into the cache {cache}: {e}. Pass '
        '--wheel_dir, or set JAX_INTERPRET_PATCHES_CACHE to a writable '
        'directory.') from e


def _readable_zip(path: str) -> bool:
  """Whether ``path`` opens as a zip archive (its central directory reads)."""
  try:
    with zipfile.ZipFile(path):
      return True
  except (OSError, zipfile.BadZipFile):
    return False


def _not_released(path: str, sha256: str | None) -> str | None:
  """Why the wheel ``path`` is not the released one, or None if it is.

  Args:
    path: a wheel file.
    sha256: the released wheel's hex sha256; None: only checks that it is a
      readable zip.
  """
  if not _readable_zip(path):
    return 'is not a readable wheel (truncated or corrupt)'
  if sha256 is None:
    return None
  try:
    actual = sha256_file(path)
  except OSError as e:
    return f'cannot be read ({e})'
  if actual != sha256:
    return (f'is not the released wheel: its sha256 is {actual}, the '
            f'manifest names {sha256}')
  return None


def _download(version: str, cache: str, sha256: str | None = None) -> str:
  """Downloads the released wheel of ``version`` into ``cache``.

  pip runs isolated (``-I``: no ``PYTHON*`` variable, no user site) in the
  new, empty download folder, so that no ``pip.py`` of the current directory
  (or of ``PYTHONPATH``) runs in its place. Its output is decoded as UTF-8
  whatever the locale; bytes that are not UTF-8 become U+FFFD.

  Raises:
    OSError: the cache is not writable.
    UnsupportedError, EnvironmentProblem: as ``pristine_wheel``; the cache
      or a folder above it is one another user can change
      (``trust.untrusted``).
  """
  name = wheel_name(version)
  why = trust.untrusted(cache)
  if why:  # E.g. root's HOME another user's (sudo -E).
    raise errors.EnvironmentProblem(
        f'The wheel cache {cache} is not used: {why}, so another user could '
        'redirect what is written there. Nothing was changed. Set '
        'JAX_INTERPRET_PATCHES_CACHE to a folder of your own.')
  os.makedirs(cache, exist_ok=True)
  with tempfile.TemporaryDirectory(dir=cache) as tmp:
    tmp = os.path.abspath(tmp)
    cmd = [sys.executable, '-I', '-m', 'pip', 'download', '--no-deps',
           '--only-binary=:all:', '--ignore-requires-python',
           f'jax=={version}', '-d', tmp]
    logging.info('Downloading %s: %s', name, ' '.join(cmd))
    proc = subprocess.run(cmd, cwd=tmp, capture_output=True,
                          encoding='utf-8', errors='replace', check=False)
    downloaded = os.path.join(tmp, name)
    if proc.returncode != 0 and 'No matching distribution' in proc.stderr:
      raise errors.UnsupportedError(
          f'jax {version} is not a release on the package index (pip found '
          f'no {name}).')
    if proc.returncode != 0 or not os.path.isfile(downloaded):
      raise errors.EnvironmentProblem(
          f'Could not download {name} with pip:\n{proc.stderr.strip()}')
    problem = _not_released(downloaded, sha256)
    if problem is not None:
      raise errors.EnvironmentProblem(
          f'The {name} pip downloaded {problem}; it was not cached. Check '
          'the package index pip uses (PIP_INDEX_URL, pip.conf).')
    os.replace(downloaded, os.path.join(cache, name))
  return os.path.join(cache, name)


def extract(wheel: str, members, dest: str) -> list[str]:
  """Extracts the named files of a wheel into ``dest`` (absent ones skipped).

  Args:
    wheel: path of the wheel.
    members: paths inside the wheel, e.g. ``jax/_src/...py``.
    dest: the directory that becomes the root of those paths.

  Returns:
    The members that were present and extracted.

  Raises:
    EnvironmentProblem: the wheel is corrupt (e.g. a bad CRC).
  """
  out = []
  try:
    with zipfile.ZipFile(wheel) as zf:
      names = set(zf.namelist())
      for f in members:
        if f not in names:
          continue
        target = os.path.join(dest, *f.split('/'))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with zf.open(f) as src, open(target, 'wb') as out_f:
          shutil.copyfileobj(src, out_f)
        out.append(f)
  except (zipfile.BadZipFile, zlib.error, EOFError) as e:
    raise errors.EnvironmentProblem(
        f'{wheel} is not a readable wheel ({e}); remove it, or replace it '
        'with the released wheel.') from e
  return out


@dataclasses.dataclass(frozen=True)
class Requirements:
  """What a released jax wheel needs, from its metadata.

  Attributes:
    python: the ``Requires-Python`` specifier, e.g. ``>=3.12``.
    jaxlib: the jaxlib versions it accepts: one version (``0.11.2``) when the
      bounds are equal, else the specifier (``>=0.11.2,<=0.12.0``).
  """
  python: str
  jaxlib: str


def _jaxlib_spec(requires: list[str]) -> str:
  for req in requires:
    if ';' in req:  # An extra's or a platform's requirement.
      continue
    m = re.fullmatch(r'jaxlib\s*(?:\((.*)\)|(.*))', req.strip())
    if m:
      spec = (m.group(1) or m.group(2) or '').replace(' ', '')
      parts = sorted(spec.split(','), key=lambda s: not s.startswith('>'))
      bounds = {re.sub(r'^[<>=!~]+', '', s) for s in parts if s}
      ops = {s[:2] for s in parts}
      if len(bounds) == 1 and (ops == {'>=', '<='} or ops == {'=='}):
        return bounds.pop()
      return ','.join(parts)
  return ''


def requirements(wheel: str) -> Requirements:
  """Reads the Python and jaxlib requirements of a jax wheel.

  Args:
    wheel: path of a ``jax-V-py3-none-any.whl``.

  Returns:
    The requirements (empty strings for what the metadata does not state).

  Raises:
    EnvironmentProblem: the wheel has no readable ``.dist-info`` metadata.
  """
  try:
    with zipfile.ZipFile(wheel) as zf:
      info = next(n.split('/', 1)[0] for n in zf.namelist()
                  if re.fullmatch(r'[^/]+\.dist-info/METADATA', n))
      dist = importlib.metadata.PathDistribution(
          zipfile.Path(zf, info + '/'))
      metadata = dist.metadata
      return Requirements(python=metadata.get('Requires-Python') or '',
                          jaxlib=_jaxlib_spec(dist.requires or []))
  except (OSError, StopIteration, zipfile.BadZipFile) as e:
    raise errors.EnvironmentProblem(
        f'Cannot read the metadata of {wheel}: {e}') from e
