"""The journal of a run's commit phase, and recovery from it.

``journal.json`` in the state directory lists, for every file a run
replaces, its path relative to site-packages, its sha256 before (``old``)
and after (``new``; None: absent), and the names of two complete,
verified temporary files beside it holding those contents (``old_tmp``,
``new_tmp``; None where the content is "absent"). It is written before the
first replace and removed after the last step.

Recovery rules (``settle``), applied under the lock by the next run:

* Each file must be at its ``old`` or its ``new`` hash; anything else means
  someone changed it since, and recovery refuses (exit 4), keeping the
  journal.
* Roll forward is possible when every file still at ``old`` has its
  verified ``new_tmp``; roll back when every file already at ``new`` has
  its verified ``old_tmp``. Phase ``commit`` prefers forward, phase
  ``rollback`` (a run that hit an error and was undoing itself) prefers
  back; the other direction is taken when the preferred one is impossible
  or a replace fails (an unreplaceable file). Either way every file ends at
  one end, so jax is left pristine or fully patched.
* A journal that cannot be read, or names a path outside site-packages/jax
  or a temporary file that is not the tool's, or another install
  (``jax_dir``), is refused (exit 7) and nothing is touched; one that is a
  link, FIFO or device, or another user's, is refused with exit 5
  (``statedir.read``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re

from migration import environment
from migration import errors
from migration import fsutil
from migration import record as record_lib
from migration import statedir

JOURNAL = statedir.JOURNAL
PHASES = ('commit', 'rollback')
_SHA_RE = re.compile(r'[0-9a-f]{64}')


@dataclasses.dataclass(frozen=True)
class Entry:
  """One file of a journal; see the module docstring."""
  path: str
  old: str | None
  new: str | None
  old_tmp: str | None
  new_tmp: str | None


@dataclasses.dataclass(frozen=True)
class Journal:
  """A run's journal: ``command`` is apply or revert; ``jax_dir`` the
  install's site-packages/jax, links resolved, and ``dist_version`` its
  jax distribution's version when the run started (each None in an older
  release's journal)."""
  command: str
  phase: str
  entries: tuple[Entry, ...]
  record: dict | None
  jax_dir: str | None = None
  dist_version: str | None = None

  def to_json(self) -> dict:
    return {'command': self.command, 'phase': self.phase,
            'files': [dataclasses.asdict(e) for e in self.entries],
            'record': self.record, 'jax_dir': self.jax_dir,
            'dist_version': self.dist_version}


def path(sdir: str) -> str:
  return os.path.join(sdir, JOURNAL)


def write(sdir: str, journal: Journal) -> None:
  """Writes the journal atomically. Raises OSError."""
  fsutil.write_atomic(sdir, JOURNAL,
                      json.dumps(journal.to_json(), indent=2).encode())


def _bad(where: str, why: str) -> errors.PatchDataError:
  return errors.PatchDataError(
      f'The journal {where} of an interrupted run is unusable ({why}); '
      'nothing was changed. Check the files with `python -m migration '
      'status`, reinstall jax if they are not pristine, then delete it.')


def load(sdir: str, env: environment.Environment) -> Journal | None:
  """Reads and checks the journal, or returns None if there is none.

  Raises:
    PatchDataError: it is unreadable, malformed, or names a path outside
      site-packages/jax, a temporary file that is not the tool's, or
      another install.
    EnvironmentProblem: it is a link, FIFO or device, or another user's.
  """
  where = path(sdir)
  data = statedir.read(where, env)
  if data is None:
    return None
  return parse(data, where, env)


def parse(data: bytes, where: str, env: environment.Environment) -> Journal:
  """Checks the journal ``data`` read from ``where``; see ``load``."""
  try:
    raw = json.loads(data)
  except ValueError as e:
    raise _bad(where, str(e)) from e
  try:
    entries = []
    for e in raw['files']:
      entry = Entry(e['path'], e['old'], e['new'], e['old_tmp'], e['new_tmp'])
      fsutil.check_relpath(entry.path, where)
      env.path(entry.path)  # Resolves inside site-packages/jax.
      for h in (entry.old, entry.new):
        if h is not None and not (isinstance(h, str)
                                  and _SHA_RE.fullmatch(h)):
          raise ValueError(f'bad sha256 {h!r}')
      for name, h in ((entry.old_tmp, entry.old), (entry.new_tmp, entry.new)):
        if (h is None) != (name is None) or name is not None and (
            not isinstance(name, str) or '/' in name
            or not name.startswith(fsutil.TMP_PREFIX)):
          raise ValueError(f'bad temporary file name {name!r}')
      entries.append(entry)
    journal = Journal(raw['command'], raw['phase'], tuple(entries),
                      raw['record'], raw.get('jax_dir'),
                      raw.get('dist_version'))
    if not isinstance(journal.dist_version, (str, type(None))):
      raise ValueError(f'bad dist_version {journal.dist_version!r}')
  except errors.PatchDataError as e:
    raise _bad(where, str(e)) from e
  except (KeyError, TypeError, ValueError, AttributeError) as e:
    raise _bad(where, f'{type(e).__name__}: {e}') from e
  if journal.command not in ('apply', 'revert') or journal.phase not in PHASES:
    raise _bad(where, f'command {journal.command!r}, phase {journal.phase!r}')
  if journal.record is not None:
    try:
      record_lib.check(journal.record, where, env)
    except errors.PatchDataError as e:
      raise _bad(where, f'bad record: {e}') from e
  if journal.jax_dir not in (None, statedir.jax_dir(env)):
    raise _bad(where, f'it is the journal of {journal.jax_dir!r}, another '
               'install')
  return journal


def find_moved(env: environment.Environment,
               sdir: str) -> tuple[str, Journal] | None:
  """Finds the journal of this install's run killed before a move here.

  A moved or renamed venv has a new state folder (``statedir``); the
  journal of a run killed before the move is in the folder of the old path,
  in the same root. It is this install's when that path is gone and a
  temporary file it names (a random name) is beside this install's files.
  Reads only.

  Args:
    env: the target environment.
    sdir: this install's state folder.

  Returns:
    ``(its path, the journal with this install's jax_dir)``, or None.
  """
  root = os.path.dirname(sdir)
  try:
    names = sorted(os.listdir(root))
  except OSError:
    return None
  for name in names:
    other = os.path.join(root, name)
    if other == sdir or not re.fullmatch(r'[0-9a-f]{16}', name):
      continue
    try:
      data = statedir.read(path(other), env)
      raw = json.loads(data) if data is not None else None
    except (errors.MigrationError, ValueError):
      continue
    old_dir = raw.get('jax_dir') if isinstance(raw, dict) else None
    if not isinstance(old_dir, str) or os.path.lexists(old_dir):
      continue  # An older release's, or a live install's.
    raw['jax_dir'] = statedir.jax_dir(env)
    if isinstance(raw.get('record'), dict) and 'jax_dir' in raw['record']:
      raw['record']['jax_dir'] = raw['jax_dir']
    try:
      journal = parse(json.dumps(raw).encode(), path(other), env)
    except errors.MigrationError:
      continue
    if any(os.path.lexists(tmp_path(env, e, n)) for e in journal.entries
           for n in (e.old_tmp, e.new_tmp) if n is not None):
      return path(other), journal
  return None


def adopt_moved(env: environment.Environment, sdir: str) -> str | None:
  """Moves the journal that ``find_moved`` finds into ``sdir``.

  Call under the install's lock, when ``sdir`` has no journal.

  Returns:
    The path the journal was moved from, or None if none was found.

  Raises:
    OSError: it could not be moved.
  """
  found = find_moved(env, sdir)
  if found is None:
    return None
  where, journal = found
  write(sdir, journal)
  os.remove(where)
  return where


def temp_paths(data: bytes, env: environment.Environment) -> list[str]:
  """The temporary files journal ``data`` names, beside ``env``'s files.

  Raises:
    PatchDataError: the journal is unusable (``parse``).
  """
  journal = parse(data, JOURNAL, env)
  return [tmp_path(env, e, name) for e in journal.entries
          for name in (e.old_tmp, e.new_tmp) if name is not None]


def tmp_path(env: environment.Environment, entry: Entry,
             name: str | None) -> str | None:
  return None if name is None else os.path.join(
      os.path.dirname(env.path(entry.path)), name)


def _feasible(env: environment.Environment, journal: Journal,
              forward: bool) -> bool:
  """Whether every file can be brought to one end (see module docstring)."""
  for e in journal.entries:
    current = fsutil.sha256_nofollow(env.path(e.path))
    have, want, name = ((e.old, e.new, e.new_tmp) if forward
                        else (e.new, e.old, e.old_tmp))
    if current == want:
      continue
    if current != have:
      return False
    if want is not None and fsutil.sha256_nofollow(
        tmp_path(env, e, name)) != want:
      return False
  return True


class ChangedError(errors.ModifiedError):
  """Another process changed a file while this run replaced the files."""

  def __init__(self, relpath: str):
    self.relpath = relpath
    super().__init__(
        f'{relpath} changed while the run was replacing jax\'s files (an '
        'editor saving it, or a pip install?); it was left as it is now.')


def _swap_in(target: str, src: str | None, have: str | None) -> None:
  """Replaces ``target`` by file ``src`` (None: removes it) if it holds
  ``have`` (None: absent) at that moment: compare and swap.

  With ``renameat2(RENAME_EXCHANGE)`` the two are swapped in one step and
  what was at ``target`` is checked afterwards at ``src``'s name, then
  swapped back if it was not ``have``: a change saved by rename (editors,
  pip) up to the swap is never lost. Elsewhere ``target`` is hashed just
  before ``os.replace``. A new file is made with ``os.link``, which never
  replaces one that appeared meanwhile.

  Raises:
    ChangedError: ``target`` does not hold ``have``; it is left as it is.
    OSError: the replace failed.
  """
  relpath = target
  if have is None:
    try:
      os.link(src, target)
    except FileExistsError as e:
      raise ChangedError(relpath) from e
    return
  if src is not None and fsutil.exchange(src, target):
    if fsutil.sha256_nofollow(src) != have:
      fsutil.exchange(src, target)
      raise ChangedError(relpath)
    return
  if fsutil.sha256_nofollow(target) != have:
    raise ChangedError(relpath)
  if src is None:
    os.remove(target)
  else:
    os.replace(src, target)


def move(env: environment.Environment, journal: Journal, forward: bool,
         kill_point=None, strict: bool = True) -> tuple[str, ...]:
  """Brings every file to its ``new`` (or ``old``) content.

  Each replace is a compare and swap (``_swap_in``): a file is replaced
  only while it holds the other end's content.

  Args:
    env: the target environment.
    journal: the run's journal.
    forward: to ``new`` (True) or back to ``old``.
    kill_point: testing only: called after each file.
    strict: whether a file at neither end (changed by another process)
      stops the move (True) or is left as it is (False: undoing a run).

  Returns:
    The files left as they were, at neither end (only if not ``strict``).

  Raises:
    ChangedError: ``strict`` and a file is at neither end; the files
      before it were moved.
    OSError: a replace failed; some files may be at either end.
  """
  entries = journal.entries if forward else tuple(reversed(journal.entries))
  left = []
  for i, e in enumerate(entries, 1):
    target = env.path(e.path)
    have, want, name = ((e.old, e.new, e.new_tmp) if forward
                        else (e.new, e.old, e.old_tmp))
    if fsutil.sha256_nofollow(target) != want:
      try:
        _swap_in(target, tmp_path(env, e, name), have)
      except ChangedError as err:
        if strict:
          raise ChangedError(e.path) from err
        left.append(e.path)
    if kill_point:
      kill_point(f'{"replaced" if forward else "rolled-back"}-{i}')
  for d in {os.path.dirname(env.path(e.path)) for e in entries}:
    fsutil.fsync_dir(d)
  return tuple(left)


def remove_temps(env: environment.Environment, journal: Journal) -> None:
  for e in journal.entries:
    for name in (e.old_tmp, e.new_tmp):
      if name is not None:
        fsutil.remove(tmp_path(env, e, name))


def settle(env: environment.Environment, journal: Journal,
           kill_point=None, where: str = JOURNAL) -> bool:
  """Brings an interrupted run to one end; see the module docstring.

  Args:
    env: the target environment.
    journal: the interrupted run's journal.
    kill_point: testing only: called after each file.
    where: the journal's path, for the messages.

  Returns:
    True if it rolled forward (the run completed), False if back.

  Raises:
    ModifiedError: a file changed since; neither end can be reached.
    EnvironmentProblem: a file cannot be replaced in either direction.
  """
  order = (True, False) if journal.phase == 'commit' else (False, True)
  failure = None
  for forward in order:
    if not _feasible(env, journal, forward):
      continue
    try:
      move(env, journal, forward, kill_point)
      return forward
    except OSError as e:
      failure = e
  if failure is not None:
    raise errors.EnvironmentProblem(
        f'Cannot finish or undo the interrupted {journal.command}: '
        f'{failure}. Make the files writable and run it again.')
  raise errors.ModifiedError(
      f'Cannot recover the interrupted {journal.command} recorded in the '
      f'journal {where}: '
      + ', '.join(e.path for e in journal.entries)
      + ' changed since. Reinstall jax (pip install --force-reinstall '
      f'--no-deps jax=={env.jax_version}), then delete {where}.')
