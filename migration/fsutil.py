"""File operations that never follow a link the tool did not create.

Every file the tool writes is first created exclusively (``mkstemp``:
``O_CREAT | O_EXCL``, a fresh random name) in the directory of its final
path, then renamed over it; a link planted at any fixed name is never
opened. Every such temporary name starts with ``TMP_PREFIX``, so that
``sweep`` can remove what a killed run left behind. Scratch directories in
``$TMPDIR`` carry the id of the process that made them; ``sweep_scratch``
removes those whose process is gone.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import hashlib
import os
import re
import shutil
import stat
import tempfile
from typing import Iterator

from migration import errors

# The start of every temporary file name the tool creates.
TMP_PREFIX = '.jax-interpret-patches-'
# The start of every scratch directory the tool creates in $TMPDIR.
SCRATCH_PREFIX = 'jax-interpret-'
_SCRATCH_RE = re.compile(re.escape(SCRATCH_PREFIX) + r'[a-z]+-(\d+)-')


def check_relpath(relpath: object, what: str) -> str:
  """Checks that ``relpath`` is a plain relative path under ``jax/``.

  Args:
    relpath: a path from the manifest or the journal, ``/``-separated.
    what: where it comes from, for the message.

  Returns:
    ``relpath``.

  Raises:
    PatchDataError: it is absolute, has ``..``, ``.`` or empty parts, or is
      not inside ``jax/``.
  """
  parts = relpath.split('/') if isinstance(relpath, str) else []
  if (len(parts) < 2 or parts[0] != 'jax'
      or any(p in ('', '.', '..') or '\\' in p or '\0' in p for p in parts)):
    raise errors.PatchDataError(
        f'{what} names {relpath!r}, which is not a path inside '
        'site-packages/jax; nothing was changed.')
  return relpath


def inside(path: str, root: str) -> bool:
  """Whether ``path``, links resolved, is ``root`` or below it."""
  real, top = os.path.realpath(path), os.path.realpath(root)
  return real == top or real.startswith(top.rstrip(os.sep) + os.sep)


def is_regular(path: str) -> bool:
  """Whether ``path`` is a regular file itself (not a link to one)."""
  try:
    return stat.S_ISREG(os.lstat(path).st_mode)
  except FileNotFoundError:
    return False


def sha256_nofollow(path: str) -> str | None:
  """The hex sha256 of regular file ``path``; None if absent or a link."""
  try:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
  except OSError:
    return None
  with os.fdopen(fd, 'rb') as f:
    if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
      return None
    return hashlib.sha256(f.read()).hexdigest()


def fsync_dir(directory: str) -> None:
  fd = os.open(directory, os.O_RDONLY)
  try:
    os.fsync(fd)
  finally:
    os.close(fd)


def write_temp(directory: str, data: bytes, mode: int | None = None) -> str:
  """Writes ``data`` to a new temporary file in ``directory``.

  Args:
    directory: where the file goes (the directory of its final path).
    data: the content.
    mode: permission bits to set, or None for mkstemp's 0o600.

  Returns:
    The path of the new file, complete and fsynced.

  Raises:
    OSError: it cannot be written (nothing is left behind).
  """
  fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, suffix='.tmp', dir=directory)
  try:
    with os.fdopen(fd, 'wb') as f:
      f.write(data)
      f.flush()
      if mode is not None:
        os.fchmod(f.fileno(), mode)
      os.fsync(f.fileno())
  except BaseException:
    os.remove(tmp)
    raise
  return tmp


def makedirs(root: str, relparts: list[str]) -> str:
  """Creates ``root/relparts...``; refuses links and non-directories.

  Raises:
    OSError: a part exists and is not a directory (e.g. a planted link).
  """
  path = root
  for part in relparts:
    path = os.path.join(path, part)
    try:
      os.mkdir(path)
    except FileExistsError:
      pass
    if not stat.S_ISDIR(os.lstat(path).st_mode):
      raise OSError(errno.ENOTDIR, 'not a directory (or a link)', path)
  return path


def write_atomic(root: str, relpath: str, data: bytes) -> None:
  """Writes ``root/relpath`` atomically (temp file, fsync, rename).

  ``root`` must exist; the directories below it are created, never through
  a link.

  Raises:
    OSError: it cannot be written; the old file, if any, is unchanged.
  """
  parts = relpath.split('/')
  directory = makedirs(root, parts[:-1])
  tmp = write_temp(directory, data)
  try:
    os.replace(tmp, os.path.join(directory, parts[-1]))
  except BaseException:
    os.remove(tmp)
    raise
  fsync_dir(directory)


def remove(path: str) -> None:
  """Removes ``path`` (a link itself, never its target) if it exists."""
  with contextlib.suppress(FileNotFoundError):
    os.remove(path)


def leftovers(directories) -> list[str]:
  """The tool's temporary files in ``directories`` (a run's or a leftover)."""
  return [path for d in dict.fromkeys(directories)
          for path in glob.glob(os.path.join(glob.escape(d), TMP_PREFIX + '*'))]


def sweep(directories) -> None:
  """Removes the temporary files a killed run left in ``directories``.

  Call only under the lock: another run's temporary files are in use.
  """
  for path in leftovers(directories):
    remove(path)


@contextlib.contextmanager
def scratch(kind: str) -> Iterator[str]:
  """A scratch directory in $TMPDIR, removed afterwards.

  Its name carries this process's id, so that ``sweep_scratch`` can remove
  it if this process is killed.
  """
  with tempfile.TemporaryDirectory(
      prefix=f'{SCRATCH_PREFIX}{kind}-{os.getpid()}-') as d:
    yield d


def _alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True
  return True


def sweep_scratch() -> None:
  """Removes scratch directories in $TMPDIR whose process is gone."""
  tmp = tempfile.gettempdir()
  try:
    names = os.listdir(tmp)
  except OSError:
    return
  for name in names:
    m = _SCRATCH_RE.match(name)
    path = os.path.join(tmp, name)
    if m and not _alive(int(m.group(1))) and not os.path.islink(path):
      shutil.rmtree(path, ignore_errors=True)
