"""Where each install's state lives, made private and read safely.

The state root is ``$JAX_INTERPRET_PATCHES_STATE_DIR`` if set, else
``<site-packages>/../.jax-interpret-patches`` (a per site-packages folder of
the user cache when that parent is read-only). Each install, that is each
``site-packages/jax`` with links resolved, has its own folder in the root,
``<root>/<key>`` (``key``: the first 16 hex digits of the sha256 of that
path), holding its lock, journal, record (``applied.json``) and backup. Two
installs that share a root (two ``pip install --target`` folders in one
parent, or one ``JAX_INTERPRET_PATCHES_STATE_DIR``) never share a journal or
a record, and each record and journal names its install (``jax_dir``).

Releases up to interpret.1 kept one install's files in the root itself
(the legacy layout). ``adopt_legacy`` moves them into the install's folder,
under both locks, only when they are provably that install's: a journal when
a temporary file it names is beside that install's files (their names are
random), a record when it names the installed jax version and the install is
(partly) patched, as the apply that wrote it left it. Until then, status and
dry runs read them where they are (``legacy_claims``).

Locks: a run that changes an install takes the install's own lock first, an
``flock`` of site-packages/jax itself (``install_locked``), so that runs
reaching one install through other paths, links or state roots exclude each
other; then the lock file in the install's folder (``locked``), which older
releases take.

A moved or renamed venv gets a new key. A journal of a run killed before
the move stays in the folder of the old key (the root moves with the venv);
``journal.adopt_moved`` moves it into the new folder when it is provably
this install's: its install's old path is gone and a temporary file it
names is beside this install's files.

Safety: only the owner of site-packages/jax changes it (``trust``). The
root and the install folder are created 0700, files 0600, whatever the
umask. A root or install folder that is a link, or that another user owns
(other than root and the owner of site-packages/jax) or can write, is
refused with exit code 5 before anything is written. State files are opened
with ``O_NOFOLLOW | O_NONBLOCK`` and must be regular files of such an owner
and mode, and of bounded size (``read``): a link, FIFO or device is refused
(exit 5) without blocking; a file too large is unusable (exit 7).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import stat
import sys
import time
from typing import Callable

from migration import environment
from migration import errors
from migration import interrupt
from migration import trust

STATE_DIR_ENV = 'JAX_INTERPRET_PATCHES_STATE_DIR'
RECORD = 'applied.json'
JOURNAL = 'journal.json'
LOCK = 'lock'
BACKUP = 'backup'
# The most bytes a record or journal may have; a backed-up file.
JSON_LIMIT = 1 << 20
FILE_LIMIT = 64 << 20


# The state roots this process resolved: (the variable, site-packages) ->
# the root, the links above it resolved.
_roots: dict[tuple[str | None, str | None], str] = {}


def root_dir(env: environment.Environment) -> str:
  """Returns the state root of ``env`` (see the module docstring).

  The links of the folders above it are resolved once, the first time it
  is asked for: every later check and write goes through that path, never
  again through a link on the way (``trust``).

  Raises:
    UsageError: ``$JAX_INTERPRET_PATCHES_STATE_DIR`` is not absolute.
  """
  key = (os.environ.get(STATE_DIR_ENV), env.site_packages or env.purelib)
  if key not in _roots:
    # The root itself is not resolved: one that is a link is refused
    # (check_dir).
    root = _root_dir(env)
    _roots[key] = os.path.join(os.path.realpath(os.path.dirname(root)),
                               os.path.basename(root))
  return _roots[key]


def _root_dir(env: environment.Environment) -> str:
  override = os.environ.get(STATE_DIR_ENV)
  if override:
    if not os.path.isabs(override):
      # Relative to the current folder, it would name another root (and
      # another journal) in every folder the tool is run from.
      raise errors.UsageError(
          f'{STATE_DIR_ENV}={override} is not an absolute path; set it to '
          'one (e.g. "$PWD/..."). Nothing was changed.')
    return os.path.normpath(override)
  site = env.site_packages or env.purelib
  assert site is not None
  parent = os.path.dirname(site)
  if os.access(parent, os.W_OK):
    return os.path.join(parent, '.jax-interpret-patches')
  xdg = os.environ.get('XDG_CACHE_HOME') or os.path.expanduser('~/.cache')
  key = hashlib.sha256(site.encode()).hexdigest()[:16]
  return os.path.join(xdg, 'jax-interpret-patches', 'state', key)


jax_dir = trust.jax_dir


def install_dir(env: environment.Environment) -> str:
  """Returns the state folder of ``env``'s install (module docstring)."""
  key = hashlib.sha256(os.fsencode(jax_dir(env))).hexdigest()[:16]
  return os.path.join(root_dir(env), key)


def _trusted_uids(env: environment.Environment) -> set[int]:
  """Root, this user, and the owner of site-packages/jax (who can change
  jax's code anyway)."""
  uids = {0, os.geteuid()}
  with contextlib.suppress(OSError):
    uids.add(os.stat(jax_dir(env)).st_uid)
  return uids


def _unsafe(st: os.stat_result, env: environment.Environment) -> str | None:
  """Why a state folder or file with stat ``st`` is not trusted, or None."""
  if st.st_uid not in _trusted_uids(env):
    return f'owned by another user (uid {st.st_uid})'
  if st.st_mode & stat.S_IWOTH:
    return f'writable by every user (mode {stat.S_IMODE(st.st_mode):o})'
  if st.st_mode & stat.S_IWGRP and not trust.group_is_private(st.st_gid,
                                                              st.st_uid):
    return (f'writable by group {st.st_gid} (mode '
            f'{stat.S_IMODE(st.st_mode):o})')
  return None


def _refuse(path: str, why: str) -> errors.EnvironmentProblem:
  return errors.EnvironmentProblem(
      f'The state path {path} is {why}; it is not used. Nothing was '
      'changed. Remove it (or make it yours and private: chmod go-w), or '
      f'set {STATE_DIR_ENV} to a folder of your own.')


def _check(path: str, env: environment.Environment,
           is_type: Callable[[int], bool], wrong_type: str) -> bool:
  """Checks ``path`` without following or opening it; False if absent.

  Raises:
    EnvironmentProblem: it is a link, fails ``is_type`` (``wrong_type``
      says how), or another user owns it or can write it.
  """
  try:
    st = os.lstat(path)
  except FileNotFoundError:
    return False
  except OSError as e:
    raise _refuse(path, f'unreadable ({e.strerror})') from e
  if stat.S_ISLNK(st.st_mode):
    raise _refuse(path, 'a symbolic link')
  if not is_type(st.st_mode):
    raise _refuse(path, wrong_type)
  why = _unsafe(st, env)
  if why:
    raise _refuse(path, why)
  return True


def check_dir(path: str, env: environment.Environment) -> bool:
  """Checks a state folder; returns False if it does not exist.

  Raises:
    EnvironmentProblem: it is a link or not a folder, or another user owns
      it or can write it.
  """
  return _check(path, env, stat.S_ISDIR, 'not a folder')


def check_file(path: str, env: environment.Environment) -> None:
  """Checks a state file without opening it (absent is fine).

  Raises:
    EnvironmentProblem: it is a link or not a regular file, or another user
      owns it or can write it.
  """
  _check(path, env, stat.S_ISREG,
         'not a regular file (a FIFO, device or folder)')


def _mkdir_private(path: str, env: environment.Environment) -> None:
  try:
    os.mkdir(path, 0o700)
  except FileExistsError:
    pass
  else:
    # 0700 whatever the umask, through a descriptor: never through a link
    # swapped in since the mkdir.
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
                 | os.O_CLOEXEC)
    try:
      os.fchmod(fd, 0o700)
    finally:
      os.close(fd)
  check_dir(path, env)


def make(env: environment.Environment) -> str:
  """Creates (or checks) the root and the install's folder, 0700.

  Returns:
    The install's state folder.

  Raises:
    EnvironmentProblem: a folder cannot be made, or is unsafe
      (``check_dir``).
  """
  root, sdir = root_dir(env), install_dir(env)
  try:
    if not check_dir(root, env):
      parent = os.path.dirname(root)
      os.makedirs(parent, exist_ok=True)
      _mkdir_private(root, env)
    _mkdir_private(sdir, env)
  except OSError as e:
    raise errors.EnvironmentProblem(
        f'Cannot create the state directory {sdir}: {e}. Nothing was '
        'changed.') from e
  return sdir


def read(path: str, env: environment.Environment,
         limit: int = JSON_LIMIT) -> bytes | None:
  """Reads a state file safely; None if it does not exist.

  Opened with ``O_NOFOLLOW | O_NONBLOCK``: a link or FIFO never blocks or
  leads elsewhere.

  Args:
    path: the file.
    env: the environment (for the trusted owners).
    limit: the most bytes it may have.

  Raises:
    EnvironmentProblem: it is a link, not a regular file, unreadable, or
      another user owns or can write it.
    PatchDataError: it is larger than ``limit``.
  """
  try:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
                 | os.O_CLOEXEC)
  except FileNotFoundError:
    return None
  except OSError as e:
    if e.errno == errno.ELOOP:
      raise _refuse(path, 'a symbolic link') from e
    raise _refuse(path, f'unreadable ({e.strerror})') from e
  with os.fdopen(fd, 'rb') as f:
    st = os.fstat(f.fileno())
    if not stat.S_ISREG(st.st_mode):
      raise _refuse(path, 'not a regular file (a FIFO, device or folder)')
    why = _unsafe(st, env)
    if why:
      raise _refuse(path, why)
    data = f.read(limit + 1)
  if len(data) > limit:
    raise errors.PatchDataError(
        f'The state file {path} is larger than {limit} bytes; it is not '
        'the tool\'s. Nothing was changed; delete it.')
  return data


@contextlib.contextmanager
def locked(sdir: str, env: environment.Environment, timeout: float):
  """Holds the lock of state folder ``sdir`` (the install's, or the root).

  The lock file is created 0600 without following a link.

  Raises:
    LockedError: another run holds it past ``timeout`` seconds.
    EnvironmentProblem: the lock file cannot be made, or is a link, not a
      regular file, or another user's.
  """
  path = os.path.join(sdir, LOCK)
  try:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW
                 | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
  except OSError as e:
    raise errors.EnvironmentProblem(
        f'Cannot take the lock {path}: {e} (a folder or a link is not a '
        'lock file; remove it). Nothing was changed.') from e
  try:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
      raise _refuse(path, 'not a regular file')
    why = _unsafe(st, env)
    if why:
      raise _refuse(path, why)
    if stat.S_IMODE(st.st_mode) & 0o077 and st.st_uid == os.geteuid():
      os.fchmod(fd, 0o600)
  finally:
    os.close(fd)
  try:
    # Imported here: status, which takes no lock, does not load it. Its
    # import makes and removes a probe folder in $TMPDIR (filelock 4.1's
    # hard-link probe): not cut short by a signal, which left the folder.
    with interrupt.deferred():
      import filelock  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise errors.EnvironmentProblem(
        f'The running Python ({sys.executable}) lacks the module filelock, '
        'which the tool needs to lock its state: pip install filelock. '
        'Nothing was changed.') from e

  lock = filelock.FileLock(path, timeout=timeout)
  try:
    lock.acquire()
  except filelock.Timeout as e:
    raise errors.LockedError(
        f'Another run holds the lock {path}; retry when it finishes.') from e
  except OSError as e:
    raise errors.EnvironmentProblem(
        f'Cannot take the lock {path}: {e}. Nothing was changed.') from e
  try:
    yield
  finally:
    lock.release()


@contextlib.contextmanager
def install_locked(env: environment.Environment, timeout: float):
  """Holds the lock of the install itself: one per site-packages/jax.

  An exclusive ``flock`` on the folder site-packages/jax (links resolved),
  opened read-only: it is keyed by the folder's device and inode, so every
  run on one install takes the same lock whatever path, link or state root
  (``$JAX_INTERPRET_PATCHES_STATE_DIR``) reached it, and nothing is written
  for it. Taken before the state folder's lock (``locked``), which an older
  release takes alone.

  Raises:
    LockedError: another run holds it past ``timeout`` seconds.
    EnvironmentProblem: the folder cannot be opened or locked.
  """
  top = jax_dir(env)
  try:
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
                 | os.O_CLOEXEC)
  except OSError as e:
    raise errors.EnvironmentProblem(
        f'Cannot open {top} to lock it: {e.strerror}. Nothing was changed.'
    ) from e
  try:
    deadline = time.monotonic() + timeout
    while True:
      try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        break
      except BlockingIOError:
        if time.monotonic() >= deadline:
          raise errors.LockedError(
              f'Another run holds the lock of {top}; retry when it '
              'finishes.') from None
        time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
      except OSError as e:
        raise errors.EnvironmentProblem(
            f'Cannot lock {top}: {e.strerror}. Nothing was changed.') from e
    yield
  finally:
    os.close(fd)  # Releases the lock.


def legacy_claims(env: environment.Environment, patched: bool,
                  journal_names) -> tuple[bool, bool]:
  """Which legacy state files in the root are this install's.

  Args:
    env: the environment.
    patched: whether its files are (partly) patched now.
    journal_names: a function of the legacy journal's bytes returning the
      paths of the temporary files it names (raises ValueError or
      MigrationError when it is unusable).

  Returns:
    ``(journal, record)``: whether the root's journal and record are this
    install's (module docstring); False where there is none, or it is not
    usable (it is then left alone: a run of another install owns it).

  Raises:
    EnvironmentProblem: the root is unsafe.
  """
  root, sdir = root_dir(env), install_dir(env)
  if not check_dir(root, env):
    return False, False
  journal = record = False
  if not os.path.lexists(os.path.join(sdir, JOURNAL)):
    data = read(os.path.join(root, JOURNAL), env)
    if data is not None:
      try:
        journal = any(os.path.lexists(p) for p in journal_names(data))
      except (ValueError, errors.MigrationError):
        journal = False
  if patched and not os.path.lexists(os.path.join(sdir, RECORD)):
    data = read(os.path.join(root, RECORD), env)
    try:
      rec = json.loads(data) if data is not None else None
    except ValueError:
      rec = None
    record = (isinstance(rec, dict)
              and rec.get('dist_version') == env.dist_version
              and rec.get('jax_dir') in (None, jax_dir(env)))
  return journal, record


def adopt_legacy(env: environment.Environment, claims: tuple[bool, bool],
                 timeout: float) -> None:
  """Moves the legacy journal and record (with the backup) of ``claims``
  from the root into the install's folder, under the root's lock (which an
  older release takes). Call under the install's lock.

  Raises:
    LockedError, EnvironmentProblem: see ``locked``; a move failed.
  """
  journal, record = claims
  if not (journal or record):
    return
  root, sdir = root_dir(env), install_dir(env)
  moves = []
  if record:
    moves += [BACKUP, RECORD]
  if journal:
    moves.append(JOURNAL)  # Last: the backup and record are in place.
  with locked(root, env, timeout):
    for name in moves:
      src, dst = os.path.join(root, name), os.path.join(sdir, name)
      if not os.path.lexists(src) or os.path.lexists(dst):
        continue
      try:
        os.rename(src, dst)
      except OSError as e:
        raise errors.EnvironmentProblem(
            f'Cannot move {src} (an older release\'s state) to {dst}: {e}'
        ) from e
