"""What an apply or revert will write, computed and verified first.

``make(...)`` reads the target files and the state directory, stages the
start contents in a scratch directory, applies (or reverse-applies) the
remaining patches there with git apply, and checks every staged hash against
the manifest. It writes nothing outside the scratch directory;
``transaction`` then writes the plan, all or nothing.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import tempfile
import zipfile
import zlib

from absl import logging

from migration import environment
from migration import errors
from migration import fsutil
from migration import gitapply
from migration import manifest as manifest_lib
from migration import record as record_lib
from migration import state
from migration import statedir
from migration import wheels


@dataclasses.dataclass(frozen=True)
class Plan:
  """Everything a run writes, computed and verified before any write.

  Attributes:
    command: ``apply`` or ``revert``.
    env: the target environment.
    sdir: its state directory.
    before: the status the plan starts from.
    old: path -> current content of every target file (None: absent).
    new: path -> verified new content.
    skipped: patches skipped because the release already contains them.
    displaced: apply: path -> sha256 of the locally modified files kept in
      the state directory (for the record); revert: those it restores.
    aside: apply --force: path -> the locally modified content to keep.
    backup: pristine contents to keep in the state directory, or None.
    record: the record to write afterwards (None: remove it).
  """
  command: str
  env: environment.Environment
  sdir: str
  before: state.Status
  old: dict[str, bytes | None]
  new: dict[str, bytes | None]
  skipped: tuple[str, ...]
  displaced: dict[str, str]
  aside: dict[str, bytes]
  backup: dict[str, bytes | None] | None
  record: dict | None

  @property
  def files(self) -> tuple[str, ...]:
    """The files whose content changes."""
    return tuple(p for p, data in self.new.items()
                 if manifest_lib.sha256_bytes(data)
                 != manifest_lib.sha256_bytes(self.old[p]))

  @property
  def goal(self) -> state.Overall:
    if self.command == 'apply':
      return state.Overall.PATCHED
    if self.displaced:
      return state.Overall.LOCALLY_MODIFIED
    return state.Overall.PRISTINE


def read(path: str) -> bytes | None:
  """Returns the content of file ``path``, or None if it does not exist.

  Raises:
    manifest.NotRegularError: it is a link, FIFO, device or folder, or
      larger than ``manifest.FILE_LIMIT`` (never followed, waited on or
      read in full).
    OSError: it cannot be read.
  """
  return manifest_lib.read_regular(path)


def _read_kept(path: str, env: environment.Environment) -> bytes | None:
  """Reads a file kept in the state directory (``statedir.read``)."""
  return statedir.read(path, env, statedir.FILE_LIMIT)


def _pristine_contents(env: environment.Environment,
                       series: manifest_lib.Series, sdir: str,
                       wheel_dirs: tuple[str, ...]) -> dict[str, bytes | None]:
  """The released contents of the target files: from the backup or wheel."""
  expected = series.hashes[env.jax_version]
  backup = record_lib.backup_dir(sdir, env.jax_version)
  out: dict[str, bytes | None] = {}
  missing = []
  for path, states in expected.items():
    if states[0] is None:
      out[path] = None
      continue
    data = _read_kept(os.path.join(backup, *path.split('/')), env)
    if manifest_lib.sha256_bytes(data) == states[0]:
      out[path] = data
    else:
      missing.append(path)
  if missing:
    wheel = wheels.pristine_wheel(
        env.jax_version, wheel_dirs,
        sha256=series.wheel_sha256.get(env.jax_version))
    try:
      with zipfile.ZipFile(wheel) as zf:
        for path in missing:
          out[path] = zf.read(path)
    except (OSError, KeyError, EOFError, RuntimeError, zipfile.BadZipFile,
            zlib.error) as e:
      # A member whose data is corrupt: zlib.error, EOFError, a bad CRC
      # (BadZipFile); an unknown compression (NotImplementedError, a
      # RuntimeError) or an encrypted member (RuntimeError).
      raise errors.EnvironmentProblem(
          f'Cannot read {wheel}: {e}. It is truncated or corrupt: remove '
          'it, or replace it with the released wheel. Nothing was '
          'changed.') from e
    for path in missing:
      if manifest_lib.sha256_bytes(out[path]) != expected[path][0]:
        raise errors.PatchDataError(
            f'{wheel}: {path} does not have the released sha256.')
  return out


def _stage(env: environment.Environment, status: state.Status,
           command: str, start: dict[str, bytes | None],
           goal_override: dict[str, bytes | None]
           ) -> tuple[dict[str, bytes | None], tuple[str, ...]]:
  """Returns the verified new contents of every target file.

  Args:
    env: the environment.
    status: its status (``applied`` is where ``start`` is in the series).
    command: ``apply`` or ``revert``.
    start: the contents to start from.
    goal_override: files whose result is set outright (revert of files that
      ``apply --force`` set aside).

  Returns:
    The new contents, and the names of the patches skipped as upstream.

  Raises:
    ConflictError: a patch does not apply.
    PatchDataError: a staged hash differs from the manifest.
    EnvironmentProblem: $TMPDIR is full or unusable.
  """
  series = status.series
  k = status.applied or 0
  if command == 'apply':
    todo = [(p, False) for p in series.patches[k:]]
  else:
    todo = [(p, True) for p in reversed(series.patches[:k])]
  upstream = set(series.upstream.get(env.jax_version, ()))
  skipped = tuple(p.name for p, _ in todo if p.name in upstream)
  for name in skipped:
    logging.info('Skipping %s: already upstream', name)
  todo = [(p, reverse) for p, reverse in todo if p.name not in upstream]
  goal = status.total if command == 'apply' else 0
  need = sum(len(d) for d in start.values() if d is not None)
  try:
    with fsutil.scratch('stage') as stage:
      new = _stage_in(stage, env, series, command, start, todo, goal)
  except (OSError, errors.ConflictError, errors.PatchDataError) as e:
    why = _tmpdir_full(e, need)
    if why is None:
      raise
    raise errors.EnvironmentProblem(
        f'Cannot stage the files in $TMPDIR ({why}); free some space there '
        'or set TMPDIR to a folder with room. Nothing was changed.') from e
  return {p: goal_override.get(p, data) for p, data in new.items()}, skipped


def _tmpdir_full(error: Exception, need: int) -> str | None:
  """Says why staging failed when $TMPDIR is to blame, else None.

  Args:
    error: what staging raised: an OSError, or a git apply failure or hash
      mismatch, which a full disk also causes (git leaves a short file).
    need: the bytes of the staged files.
  """
  if isinstance(error, OSError):
    return str(error)
  if 'No space left' in str(error):
    return 'No space left on device'
  try:
    st = os.statvfs(tempfile.gettempdir())
  except OSError as e:
    return str(e)
  if st.f_bavail * st.f_frsize < 2 * need + (1 << 20):
    return 'No space left on device'
  return None


def _stage_in(stage: str, env: environment.Environment,
              series: manifest_lib.Series, command: str,
              start: dict[str, bytes | None], todo,
              goal: int) -> dict[str, bytes | None]:
  """Stages ``start`` in ``stage``, runs ``todo``, checks the hashes."""
  for path, data in start.items():
    if data is not None:
      fsutil.makedirs(stage, path.split('/')[:-1])
      with open(os.path.join(stage, *path.split('/')), 'wb') as f:
        f.write(data)
  for patch, reverse in todo:
    logging.info('%s %s', 'Reverting' if reverse else 'Applying', patch.name)
    gitapply.apply(patch.path, stage, reverse=reverse)
  new: dict[str, bytes | None] = {}
  for path, states in series.hashes[env.jax_version].items():
    data = read(os.path.join(stage, *path.split('/')))
    if manifest_lib.sha256_bytes(data) != states[goal]:
      raise errors.PatchDataError(
          f'After {command}, {path} has sha256 '
          f'{manifest_lib.sha256_bytes(data)} but the manifest expects '
          f'{states[goal]}; the patches and manifest disagree. Nothing '
          'was changed.')
    new[path] = data
  return new


def _restore_displaced(env: environment.Environment, sdir: str,
                       rec: dict | None) -> dict[str, bytes]:
  """The files that ``apply --force`` set aside, to restore on revert.

  Only a record of this install's jax version counts; the caller passes
  None when the install was replaced since (its files are not patched).
  """
  if not rec or rec.get('dist_version') != env.dist_version:
    return {}
  root = record_lib.displaced_dir(sdir, env.jax_version)
  out = {}
  for path, sha in dict(rec.get('displaced') or {}).items():
    fsutil.check_relpath(path, os.path.join(sdir, record_lib.RECORD))
    data = _read_kept(os.path.join(root, *path.split('/')), env)
    if manifest_lib.sha256_bytes(data) != sha:
      raise errors.ModifiedError(
          f'The locally modified {path} that apply --force kept in {root} '
          'is missing or changed; cannot restore it. Nothing was changed.')
    out[path] = data
  return out


def _record(env: environment.Environment, series: manifest_lib.Series,
            release: int, skipped: tuple[str, ...],
            displaced: dict[str, str]) -> dict:
  return {
      'jax_dir': statedir.jax_dir(env),
      'series': series.name,
      'release': release,
      'jax_version': env.jax_version,
      'dist_version': env.dist_version,
      'patches': [p.name for p in series.patches],
      'skipped_upstream': list(skipped),
      'displaced': displaced,
      'time': datetime.datetime.now(datetime.timezone.utc).isoformat(
          timespec='seconds'),
  }


def make(command: str, before: state.Status, sdir: str, release: int,
         force: bool, wheel_dirs: tuple[str, ...]) -> Plan:
  """Computes and verifies everything ``command`` writes; writes nothing.

  Args:
    command: ``apply`` or ``revert``.
    before: the status of the target files (classified once per run).
    sdir: the state directory (backup, record).
    release: the project release number, for the record.
    force: ``apply --force``: start from the released files and set the
      locally modified ones aside.
    wheel_dirs: directories searched for the released wheel first.

  Raises:
    ModifiedError: files locally modified or mixed (without ``force``).
    ConflictError, PatchDataError: the patches do not give the manifest's
      hashes.
    EnvironmentProblem: the released wheel is needed and cannot be had.
  """
  env = before.env
  rec = record_lib.load(sdir, env)
  # A record is of the files as its apply left them: (partly) patched. If
  # they are not, jax was reinstalled since, and what that apply set aside
  # belongs to the replaced install: never carried over or restored.
  if before.overall not in (state.Overall.PATCHED,
                            state.Overall.PARTLY_PATCHED,
                            state.Overall.OUTDATED):
    rec = None
  try:
    old = {f.path: read(env.path(f.path)) for f in before.files}
  except manifest_lib.NotRegularError as e:
    raise errors.ModifiedError(
        f'{e.filename} is {e.strerror}, not a file of jax: locally '
        f'modified, and nothing {command} could set aside or restore. '
        'Nothing was changed. Remove it, then reinstall jax: pip install '
        f'--force-reinstall --no-deps jax=={env.jax_version}') from e
  modified = before.overall in (state.Overall.LOCALLY_MODIFIED,
                                state.Overall.MIXED)
  if modified and not force:
    raise errors.ModifiedError(
        f'{before.message} Refusing to {command}; nothing was changed. '
        + ('Use apply --force to set the modified files aside (revert '
           'restores them), or reinstall jax: ' if command == 'apply' else
           'To start over, reinstall jax: ')
        + f'pip install --force-reinstall --no-deps jax=={env.jax_version}')
  aside: dict[str, bytes] = {}
  restore: dict[str, bytes | None] = {}
  backup = None
  # Where the series starts: the install's files less the modules that a
  # reinstall of jax left behind (``Status.leftover``).
  start = {p: None if p in before.leftover else data
           for p, data in old.items()}
  status = before
  if modified or before.overall == state.Overall.OUTDATED:
    # Start from the released files. Locally modified ones are set aside; the
    # files of an earlier release's patches are simply replaced.
    backup = start = _pristine_contents(env, before.series, sdir, wheel_dirs)
    status = dataclasses.replace(before, applied=0)
    if modified:
      aside = {f.path: old[f.path] for f in before.files
               if not f.applied and f.sha256 is not None}
  elif command == 'apply' and before.overall == state.Overall.PRISTINE:
    backup = start
  if command == 'revert' and not modified:
    restore = _restore_displaced(env, sdir, rec)
  new, skipped = _stage(env, status, command, start, restore)
  displaced = {p: manifest_lib.sha256_bytes(data) or ''
               for p, data in (aside or restore).items()}
  new_rec = None
  if command == 'apply':
    if not aside and rec and rec.get('dist_version') == env.dist_version:
      displaced = dict(rec.get('displaced') or {})
    new_rec = _record(env, before.series, release, skipped,
                      displaced)
  return Plan(command, env, sdir, before, old, new, skipped, displaced,
              aside, backup, new_rec)
