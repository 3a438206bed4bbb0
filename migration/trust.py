"""Who may change an install, and which folders the tool writes through.

The privilege model: the tool changes an install (``apply``, ``revert``)
only as the user who owns its ``site-packages/jax`` (links resolved). A run
as anyone else, root included, is refused with exit code 5 before anything
is written, naming the owner and the
command that works: ``sudo -u OWNER ...``. So the tool never acts with more
rights than the install's owner has, and nothing the owner can change (their
folders, their state files) can steer it to another user's files: there is
no ``chown`` and no check-then-use of a path across a privilege boundary.
``status``, ``check``, dry runs and ``wheel`` write nothing in the install
and run as anyone; but ``--python`` runs only an interpreter that no other
user can change (``check_interpreter``).

Every folder the tool writes in (each target file's folder and its
``__pycache__``, the state root and the install's state folder) must also
be *trusted*: it and each folder above it, links resolved, is a real folder
owned by root or this user and writable by no other user, by its mode or
by a POSIX ACL (a group-writable one only if the group is its owner's
alone), except that a sticky folder (``/tmp``) may be writable by all when
the entry below it is owned by root or this user. Then no other user can
swap a folder on the path for a link between a check and a write; and the
paths were resolved once, when the environment was detected
(``environment``), so every write goes through them, never again through a
link on the way. A ``__pycache__`` that is a link is refused too, as it
would lead the removal of stale bytecode out of jax. Both refusals are
exit code 5.
"""

from __future__ import annotations

import glob
import grp
import os
import pwd
import stat
import struct

from migration import environment
from migration import errors


def _user(uid: int) -> str:
  try:
    return pwd.getpwuid(uid).pw_name
  except KeyError:
    return f'#{uid}'  # The spelling sudo -u takes for a bare uid.


def jax_dir(env: environment.Environment) -> str:
  """The install's site-packages/jax, links resolved (when it was
  detected: ``environment.Environment.jax_root``)."""
  if env.jax_root is not None:
    return env.jax_root
  site = env.site_packages or env.purelib
  assert site is not None
  return os.path.realpath(os.path.join(site, 'jax'))


def require_owner(env: environment.Environment, command: str) -> None:
  """Refuses to change an install that this user does not own.

  Args:
    env: the target environment (jax installed).
    command: the command, for the message (``apply``, ``revert``).

  Raises:
    EnvironmentProblem: site-packages/jax cannot be read, or another user
      (root too) owns it.
  """
  top = jax_dir(env)
  try:
    st = os.stat(top)
  except OSError as e:
    raise errors.EnvironmentProblem(
        f'Cannot read {top}: {e.strerror}. Nothing was changed.') from e
  me = os.geteuid()
  if st.st_uid != me:
    owner = _user(st.st_uid)
    python = env.python or 'PYTHON'
    raise errors.EnvironmentProblem(
        f'{top} belongs to {owner}, and this run is {_user(me)}\'s: the '
        'tool changes an install only as its owner. Nothing was changed. '
        f'Run it as {owner}: sudo -u {owner} {python} -m migration '
        f'{command} (or that user\'s jax-interpret-patches {command}).')


def group_is_private(gid: int, uid: int) -> bool:
  """Whether only user ``uid`` is in group ``gid`` (a user private group)."""
  try:
    owner = pwd.getpwuid(uid).pw_name
    members = set(grp.getgrgid(gid).gr_mem)
    others = {p.pw_name for p in pwd.getpwall()
              if p.pw_gid == gid and p.pw_uid != uid}
  except (KeyError, OSError):
    return False
  return members <= {owner} and not others


def _others_can_write(st: os.stat_result) -> bool:
  if st.st_mode & stat.S_IWOTH:
    return True
  return bool(st.st_mode & stat.S_IWGRP) and not group_is_private(
      st.st_gid, st.st_uid)


# The access ACL of a file (linux/posix_acl_xattr.h): a version, then
# entries of a tag, permission bits and an id, little-endian.
_ACL_XATTR = 'system.posix_acl_access'
_ACL_ENTRY = struct.Struct('<HHI')
_ACL_USER, _ACL_GROUP, _ACL_MASK = 0x02, 0x08, 0x10
_ACL_WRITE = 0x02


def _acl_writer(path: str, trusted: set[int]) -> str | None:
  """Who else than the trusted users an access ACL lets write ``path``
  (a named user or group, with the ACL's mask), or None."""
  try:
    raw = os.getxattr(path, _ACL_XATTR, follow_symlinks=False)
  except OSError:  # ENODATA: no ACL; ENOTSUP: none on this file system.
    return None
  entries = [_ACL_ENTRY.unpack_from(raw, offset)
             for offset in range(4, len(raw) - _ACL_ENTRY.size + 1,
                                 _ACL_ENTRY.size)]
  mask = next((perm for tag, perm, _ in entries if tag == _ACL_MASK), 0o7)
  for tag, perm, ident in entries:
    if not perm & mask & _ACL_WRITE:
      continue
    if tag == _ACL_USER and ident not in trusted:
      return f'user {_user(ident)} (an ACL)'
    if tag == _ACL_GROUP:
      return f'group {ident} (an ACL)'
  return None


def untrusted(path: str) -> str | None:
  """Why folder ``path`` is not trusted (module docstring), or None.

  Args:
    path: an absolute folder path; links in it are resolved, and the
      folders from ``/`` down to it (or to the deepest that exists, for
      one the tool will make) are checked.
  """
  trusted = {0, os.geteuid()}
  real = os.path.realpath(path)
  parts = [p for p in real.split(os.sep) if p]
  current = os.sep
  try:
    st = os.lstat(current)
    for part in parts + [None]:
      if not stat.S_ISDIR(st.st_mode):
        return f'{current} is not a folder'
      if st.st_uid not in trusted:
        return f'{current} belongs to {_user(st.st_uid)}'
      child = None
      if part is not None:
        try:
          child = os.lstat(os.path.join(current, part))
        except FileNotFoundError:  # Made later, by this run, in current.
          part = None
      sticky = (st.st_mode & stat.S_ISVTX and child is not None
                and child.st_uid in trusted)
      if _others_can_write(st) and not sticky:
        return (f'{current} is writable by other users (mode '
                f'{stat.S_IMODE(st.st_mode):o})')
      acl = _acl_writer(current, trusted)
      if acl and not sticky:
        return f'{current} is writable by {acl}'
      if part is None:
        break
      assert child is not None
      if stat.S_ISLNK(child.st_mode):  # Swapped in since realpath.
        return f'{os.path.join(current, part)} is a symbolic link'
      current, st = os.path.join(current, part), child
  except OSError as e:
    return f'{current}: {e.strerror}'
  return None


def untrusted_file(path: str) -> str | None:
  """Why file ``path`` is not trusted, or None: it (links resolved) and
  every folder above it must be changeable only by root or this user, as
  ``untrusted`` says of a folder.

  Args:
    path: an absolute path of an existing file.
  """
  real = os.path.realpath(path)
  why = untrusted(os.path.dirname(real))
  if why:
    return why
  trusted = {0, os.geteuid()}
  try:
    st = os.stat(real)
  except OSError as e:
    return f'{real}: {e.strerror}'
  if st.st_uid not in trusted:
    return f'{real} belongs to {_user(st.st_uid)}'
  if _others_can_write(st):
    return (f'{real} is writable by other users (mode '
            f'{stat.S_IMODE(st.st_mode):o})')
  acl = _acl_writer(real, trusted)
  return f'{real} is writable by {acl}' if acl else None


def check_interpreter(python: str) -> str:
  """Checks an interpreter that another user could change; returns the
  path to run.

  ``--python`` runs the named interpreter to find its jax; what it runs
  (its executable, the ``pyvenv.cfg`` beside it, and the standard library
  its ``home`` names) would run as this user, who may be root. So they, and
  every folder above them, must be changeable only by root or this user
  (``untrusted_file``): another user's venv is inspected by that user,
  never by root. (Its ``.pth`` files do not run: ``targetenv``.) The path
  returned is the one checked: its folder resolved once, here, so that a
  link on the way that changes afterwards does not change what runs.

  Args:
    python: the interpreter, an absolute path.

  Returns:
    The path to run: ``python`` in its folder with links resolved.

  Raises:
    EnvironmentProblem: it, its folder, its ``pyvenv.cfg`` or the folders
      its ``home`` names are not trusted.
  """
  bindir = os.path.realpath(os.path.dirname(python))
  python = os.path.join(bindir, os.path.basename(python))
  checks = [(untrusted, bindir), (untrusted_file, python)]
  for d in (bindir, os.path.dirname(bindir)):
    cfg = os.path.join(d, 'pyvenv.cfg')
    if not os.path.lexists(cfg):
      continue
    checks.append((untrusted_file, cfg))
    for home in _venv_homes(cfg):
      checks.append((untrusted, home))
      prefix = os.path.dirname(home)
      checks += [(untrusted, p)
                 for p in glob.glob(os.path.join(glob.escape(prefix),
                                                 'lib*', 'python3*'))]
  for check, path in checks:
    why = check(path)
    if why:
      raise errors.EnvironmentProblem(
          f'--python={python}: {why}, so running it would run code another '
          f'user can change, as {_user(os.geteuid())}. Nothing was run. '
          'Run the tool as that user (sudo -u USER), or name an '
          'interpreter of your own.')
  return python


def _venv_homes(cfg: str) -> list[str]:
  """The ``home`` folders that a ``pyvenv.cfg`` names (its base Python's
  ``bin``, whose standard library a venv loads); unreadable: none."""
  try:
    with open(cfg, encoding='utf-8', errors='replace') as f:
      lines = f.read(1 << 16).splitlines()
  except OSError:
    return []
  return [value.strip() for key, _, value in (line.partition('=')
                                               for line in lines)
          if key.strip().lower() == 'home' and os.path.isabs(value.strip())]


def check_folders(env: environment.Environment, folders) -> None:
  """Checks that the tool may write in each of ``folders``.

  Args:
    env: the target environment.
    folders: absolute folder paths the tool writes in (target folders and
      their ``__pycache__``, the state root); a ``__pycache__`` that does
      not exist is skipped.

  Raises:
    EnvironmentProblem: one is a link (a ``__pycache__``) or not trusted
      (module docstring); names it and why.
  """
  for folder in dict.fromkeys(folders):
    if os.path.basename(folder) == '__pycache__':
      try:
        st = os.lstat(folder)
      except FileNotFoundError:
        continue
      except OSError as e:
        st = None
        why = e.strerror
      else:
        why = None
        if stat.S_ISLNK(st.st_mode):
          why = 'a symbolic link'
        elif not stat.S_ISDIR(st.st_mode):
          why = 'not a folder'
      if why:
        raise errors.EnvironmentProblem(
            f'{folder} is {why}: the tool does not write through it. '
            f'Nothing was changed. Remove it (Python makes a new one) and '
            'run again.')
    why = untrusted(folder)
    if why:
      raise errors.EnvironmentProblem(
          f'The tool does not write in {folder}: {why}, so another user '
          'could redirect its writes. Nothing was changed. Make the '
          f'folders on the path to {env.site_packages} writable by their '
          'owner alone (chmod go-w), or use a virtualenv of your own.')
