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
import ctypes
import errno
import fcntl
import glob
import hashlib
import os
import re
import shutil
import stat
import tempfile
import time
from typing import Iterator

from migration import errors
from migration import interrupt

# The start of every temporary file name the tool creates.
TMP_PREFIX = '.jax-interpret-patches-'
# The start of every scratch directory the tool creates in $TMPDIR.
SCRATCH_PREFIX = 'jax-interpret-'
_SCRATCH_RE = re.compile(re.escape(SCRATCH_PREFIX) + r'[a-z]+-(\d+)-')
# The owner lock file in every scratch directory.
OWNER_LOCK = '.owner.lock'
# A scratch directory without an owner lock file was made by a tool version
# from before the lock (or is being made right now): the sweep removes it
# only if it is older than this, in seconds, and its process id is not alive.
LEGACY_SCRATCH_AGE_S = 24 * 3600


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
  """Whether ``path``, links resolved, is ``root`` or below it (False if
  the links cannot be resolved, e.g. while they change)."""
  try:
    real, top = os.path.realpath(path), os.path.realpath(root)
  except OSError:
    return False
  return real == top or real.startswith(top.rstrip(os.sep) + os.sep)


def is_regular(path: str) -> bool:
  """Whether ``path`` is a regular file itself (not a link to one)."""
  try:
    return stat.S_ISREG(os.lstat(path).st_mode)
  except FileNotFoundError:
    return False


def sha256_nofollow(path: str, limit: int = 64 << 20) -> str | None:
  """The hex sha256 of regular file ``path``.

  Opened with ``O_NOFOLLOW | O_NONBLOCK``, so a FIFO never blocks.

  Args:
    path: the file.
    limit: the most bytes read; a larger file gives ``'larger than LIMIT
      bytes'``, which matches no sha256.

  Returns:
    The hex digest; None if ``path`` is absent, a link, or not a regular
    file (a FIFO, device or folder).
  """
  try:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
  except OSError:
    return None
  try:
    if not stat.S_ISREG(os.fstat(fd).st_mode):
      return None
    with os.fdopen(fd, 'rb', closefd=False) as f:
      data = f.read(limit + 1)
  finally:
    os.close(fd)
  if len(data) > limit:
    return f'larger than {limit} bytes'
  return hashlib.sha256(data).hexdigest()


_RENAME_EXCHANGE = 2  # linux/fs.h
_AT_FDCWD = -100


def _renameat2():
  """libc's renameat2, or None where it is missing (glibc < 2.28)."""
  try:
    libc = ctypes.CDLL(None, use_errno=True)
    fn = libc.renameat2
  except (OSError, AttributeError):
    return None
  fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int,
                 ctypes.c_char_p, ctypes.c_uint]
  fn.restype = ctypes.c_int
  return fn


def exchange(a: str, b: str) -> bool:
  """Swaps the files at paths ``a`` and ``b`` in one atomic step.

  Linux's ``renameat2(RENAME_EXCHANGE)``: both names exist throughout, and
  afterwards each holds what the other held. Links are swapped as they
  are, never followed.

  Args:
    a: an existing file.
    b: an existing file, on the same file system.

  Returns:
    True if swapped; False where the system or file system cannot
    (``ENOSYS``, ``EINVAL``; nothing was changed).

  Raises:
    OSError: the swap failed otherwise (e.g. ``EPERM``, ``ENOENT``).
  """
  fn = _renameat2()
  if fn is None:
    return False
  if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b),
        _RENAME_EXCHANGE) == 0:
    return True
  err = ctypes.get_errno()
  if err in (errno.ENOSYS, errno.EINVAL):
    return False
  raise OSError(err, os.strerror(err), a, None, b)


def fsync_dir(directory: str) -> None:
  fd = os.open(directory, os.O_RDONLY)
  try:
    os.fsync(fd)
  finally:
    os.close(fd)


def write_temp(directory: str, data: bytes, mode: int | None = None,
               owner: tuple[int, int] | None = None) -> str:
  """Writes ``data`` to a new temporary file in ``directory``.

  Args:
    directory: where the file goes (the directory of its final path).
    data: the content.
    mode: permission bits to set, or None for mkstemp's 0o600.
    owner: ``(uid, gid)`` to give the file (root patching another user's
      venv keeps the files that user's), or None to keep this process's;
      what this process may not give (not root) is left as it is.

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
      if owner is not None and owner != (os.geteuid(), os.getegid()):
        with contextlib.suppress(PermissionError):
          os.fchown(f.fileno(), *owner)
      if mode is not None:  # After fchown, which may clear set-id bits.
        os.fchmod(f.fileno(), mode)
      os.fsync(f.fileno())
  except BaseException:
    remove(tmp)
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
      os.mkdir(path, 0o700)
    except FileExistsError:
      pass
    if not stat.S_ISDIR(os.lstat(path).st_mode):
      raise OSError(errno.ENOTDIR, 'not a directory (or a link)', path)
  return path


def write_atomic(root: str, relpath: str, data: bytes,
                 mode: int | None = None) -> None:
  """Writes ``root/relpath`` atomically (temp file, fsync, rename).

  ``root`` must exist; the directories below it are created, never through
  a link.

  Args:
    root: an existing directory.
    relpath: the file's path below ``root``, with ``/``.
    data: the content.
    mode: permission bits of the file, or None for mkstemp's 0o600 (the
      tool's state files).

  Raises:
    OSError: it cannot be written; the old file, if any, is unchanged.
  """
  parts = relpath.split('/')
  directory = makedirs(root, parts[:-1])
  tmp = write_temp(directory, data, mode)
  try:
    os.replace(tmp, os.path.join(directory, parts[-1]))
  except BaseException:
    os.remove(tmp)
    raise
  fsync_dir(directory)


def remove(path: str) -> None:
  """Removes ``path`` (a link itself, never its target) if it exists.

  A signal (``interrupt``) waits until it is gone: cleanup is not cut short.
  """
  with interrupt.deferred(), contextlib.suppress(FileNotFoundError):
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

  Named ``jax-interpret-<kind>-<pid>-<random>``. While it exists this
  process holds an exclusive ``flock`` on its ``OWNER_LOCK`` file, so that
  ``sweep_scratch`` (of any process, in any PID namespace) leaves it alone,
  and removes it once this process is gone, killed or not.

  Args:
    kind: a lowercase word naming the use (``stage``, ``status``, ...).

  Yields:
    The directory's path.

  Raises:
    OSError: the directory or its lock file cannot be made, or the
      directory cannot be removed afterwards.
  """
  d, fd = None, -1
  try:
    # A signal waits until the directory has its lock, or a sweep would
    # take a lockless leftover for an older version's.
    with interrupt.deferred():
      d = tempfile.mkdtemp(prefix=f'{SCRATCH_PREFIX}{kind}-{os.getpid()}-')
      # The lock file is locked before it gets its name: a sweep never sees
      # it unlocked while this process lives.
      fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, dir=d)
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # A new file: no wait.
      os.rename(tmp, os.path.join(d, OWNER_LOCK))
    yield d
  finally:
    with interrupt.deferred():  # Not cut short by a signal.
      try:
        if d is not None:
          _rmtree_lock_last(d)  # Still locked while it goes.
      finally:
        if fd >= 0:
          os.close(fd)


def _rmtree_lock_last(d: str) -> None:
  """Removes scratch directory ``d``, its ``OWNER_LOCK`` last: a removal
  that fails half-way (``EMFILE``, ...) leaves an owned directory, which a
  later ``sweep_scratch`` removes, not an unowned one it keeps for a day."""
  for name in os.listdir(d):
    if name == OWNER_LOCK:
      continue
    path = os.path.join(d, name)
    if os.path.isdir(path) and not os.path.islink(path):
      shutil.rmtree(path)
    else:
      os.remove(path)
  shutil.rmtree(d)


def _alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True
  return True


def _take_owner_lock(dir_fd: int, pid: int, mtime: float) -> int | None:
  """Takes the owner lock of the scratch directory open as ``dir_fd``.

  Args:
    dir_fd: the directory, opened without following a link.
    pid: the process id in its name.
    mtime: its modification time, in seconds since the epoch.

  Returns:
    An open fd holding the lock (-1 for a directory without a lock file
    that counts as unowned), or None if a live process may own it.
  """
  try:
    fd = os.open(OWNER_LOCK, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK,
                 dir_fd=dir_fd)
  except FileNotFoundError:
    # An older tool version's (or one being made right now).
    if time.time() - mtime > LEGACY_SCRATCH_AGE_S and not _alive(pid):
      return -1
    return None
  except OSError:  # A link (ELOOP), or unreadable: not ours to judge.
    return None
  try:
    if stat.S_ISREG(os.fstat(fd).st_mode):
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
      return fd
  except OSError:  # Held (EWOULDBLOCK): its maker is alive.
    pass
  os.close(fd)
  return None


def sweep_scratch() -> None:
  """Removes the scratch directories in $TMPDIR of processes that are gone.

  Only directories (not links) of this user named as ``scratch`` names them
  are considered. One whose owner lock can be taken at once (its maker has
  ended) is removed. One without a lock file, made by a tool version before
  the lock, is removed only if it is older than ``LEGACY_SCRATCH_AGE_S`` and
  its process id is not alive here. Links inside are removed, never
  followed. A directory that cannot be removed is left, silently.
  """
  tmp = tempfile.gettempdir()
  try:
    names = os.listdir(tmp)
  except OSError:
    return
  for name in names:
    m = _SCRATCH_RE.match(name)
    if not m:
      continue
    path = os.path.join(tmp, name)
    try:
      dir_fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:  # Gone, a link, or not a directory.
      continue
    lock_fd = None
    try:
      st = os.fstat(dir_fd)
      if st.st_uid == os.geteuid():
        lock_fd = _take_owner_lock(dir_fd, int(m.group(1)), st.st_mtime)
      now = os.lstat(path)
      if (lock_fd is not None
          and (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino)):
        shutil.rmtree(path, ignore_errors=True)
    except OSError:
      pass
    finally:
      if lock_fd is not None and lock_fd >= 0:
        os.close(lock_fd)
      os.close(dir_fd)
