"""All-or-nothing apply and revert of a series in site-packages.

Steps: classify the files; lock; recover an interrupted run from its
journal; copy the target files to a staging directory; apply (or
reverse-apply) the remaining patches there with git apply, skipping those
the release already contains; verify every staged hash against the
manifest; write same-directory temp files; journal; ``os.replace`` each
file; clear stale ``__pycache__``; write the record; drop the journal.

A run killed before the journal reaches its commit phase left site-packages
untouched (temp files are removed on the next run); one killed during the
commit phase is rolled forward on the next run, since every temp file was
complete and verified before the first replace. Either way the next apply
or revert leaves jax pristine or fully patched.
"""

from __future__ import annotations

import dataclasses
import datetime
import glob
import json
import os
import shutil
import signal
import tempfile
import zipfile

from absl import logging
import filelock

from migration import environment
from migration import errors
from migration import gitapply
from migration import manifest as manifest_lib
from migration import record as record_lib
from migration import state
from migration import wheels

STATE_DIR_ENV = record_lib.STATE_DIR_ENV
# Testing only: exit abruptly after this many files were replaced.
CRASH_ENV = 'JAX_INTERPRET_PATCHES_TEST_CRASH_AFTER'
# Testing only: SIGKILL the run itself when it reaches this step.
KILL_ENV = 'JAX_INTERPRET_PATCHES_TEST_KILL_AT'
# The steps KILL_ENV can name, in the order a run reaches them.
STEPS = ('locked', 'recovered', 'staged', 'backed-up', 'journal-staging',
         'temp-written', 'journal-commit', 'replaced-one', 'replaced-all',
         'pycache-cleared', 'record-written')
JOURNAL = 'journal.json'
TMP_SUFFIX = '.jax-interpret-patches.tmp'

state_dir = record_lib.state_dir


@dataclasses.dataclass(frozen=True)
class Result:
  """Outcome of apply or revert.

  Attributes:
    command: ``apply`` or ``revert``.
    changed: whether files in site-packages were replaced.
    message: one-line summary.
    before: status before the run.
    after: status after the run (for a dry run: the same as before).
    files: the files that were (or, for a dry run, would be) replaced.
    recovered: whether an interrupted run was recovered first.
    state_dir: directory holding the lock, journal and backup.
    skipped: patches skipped because the release already contains them.
    dry_run: whether nothing was written on purpose.
    displaced: locally modified files set aside by ``apply --force`` (or
      restored by revert).
  """
  command: str
  changed: bool
  message: str
  before: state.Status
  after: state.Status
  files: tuple[str, ...] = ()
  recovered: bool = False
  state_dir: str | None = None
  skipped: tuple[str, ...] = ()
  dry_run: bool = False
  displaced: tuple[str, ...] = ()


def _kill_point(step: str) -> None:
  """Testing only: SIGKILLs this process at ``step`` if asked to."""
  if os.environ.get(KILL_ENV) == step:
    os.kill(os.getpid(), signal.SIGKILL)


def _probe_writable(directory: str) -> str | None:
  """Returns why ``directory`` is not writable, or None if it is."""
  try:
    fd, probe = tempfile.mkstemp(prefix='.probe-', dir=directory)
  except OSError as e:
    return e.strerror or str(e)
  os.close(fd)
  os.remove(probe)
  return None


def check_writable(env: environment.Environment, files: list[str],
                   sdir: str) -> None:
  """Checks that every directory this run writes to is writable.

  Raises:
    EnvironmentProblem: a directory is read-only (names it).
  """
  dirs = []
  for f in files:
    d = os.path.dirname(env.path(f))
    dirs.append(d)
    if os.path.isdir(os.path.join(d, '__pycache__')):
      dirs.append(os.path.join(d, '__pycache__'))
  try:
    os.makedirs(sdir, exist_ok=True)
  except OSError as e:
    raise errors.EnvironmentProblem(
        f'Cannot create the state directory {sdir}: {e}') from e
  for d in dict.fromkeys([*dirs, sdir]):
    why = _probe_writable(d)
    if why:
      raise errors.EnvironmentProblem(
          f'{d} is not writable ({why}); site-packages {env.site_packages} '
          'must be writable to patch jax in place. Nothing was changed. '
          'Use a virtualenv you own, or run with sufficient permissions.')


def _fsync_dir(directory: str) -> None:
  fd = os.open(directory, os.O_RDONLY)
  try:
    os.fsync(fd)
  finally:
    os.close(fd)


def _write_bytes(path: str, data: bytes) -> None:
  """Writes ``path`` atomically (temp file, fsync, rename)."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  tmp = path + '.tmp'
  with open(tmp, 'wb') as f:
    f.write(data)
    f.flush()
    os.fsync(f.fileno())
  os.replace(tmp, path)
  _fsync_dir(os.path.dirname(path))


def _write_json(path: str, data: dict) -> None:
  _write_bytes(path, json.dumps(data, indent=2).encode())


def _read(path: str) -> bytes | None:
  try:
    with open(path, 'rb') as f:
      return f.read()
  except FileNotFoundError:
    return None


def clear_pycache(env: environment.Environment, files: list[str]) -> None:
  """Removes the cached bytecode of the given modules."""
  for f in files:
    d, name = os.path.split(env.path(f))
    stem = os.path.splitext(name)[0]
    for pyc in glob.glob(os.path.join(glob.escape(d), '__pycache__',
                                      glob.escape(stem) + '.*.pyc')):
      logging.info('Removing %s', pyc)
      os.remove(pyc)


def _write_record(sdir: str, rec: dict | None) -> None:
  path = os.path.join(sdir, record_lib.RECORD)
  if rec is None:
    if os.path.exists(path):
      os.remove(path)
  else:
    _write_json(path, rec)


def recover(env: environment.Environment, sdir: str) -> bool:
  """Finishes or undoes a run that was killed; call under the lock.

  Returns:
    Whether there was an interrupted run.

  Raises:
    ModifiedError: the files changed since the interrupted run.
  """
  path = os.path.join(sdir, JOURNAL)
  if not os.path.exists(path):
    return False
  with open(path, encoding='utf-8') as f:
    journal = json.load(f)
  entries = journal['files']
  if journal['phase'] == 'staging':
    logging.warning('Undoing an interrupted run (no file had been replaced).')
    for e in entries:
      if os.path.exists(e['tmp']):
        os.remove(e['tmp'])
  else:
    logging.warning('Completing an interrupted %s.', journal['command'])
    for e in entries:
      target = env.path(e['path'])
      if manifest_lib.sha256_path(target) == e['sha256']:
        continue
      if e['sha256'] is None:
        os.remove(target)
      elif manifest_lib.sha256_path(e['tmp']) == e['sha256']:
        os.replace(e['tmp'], target)
      else:
        raise errors.ModifiedError(
            f'Cannot recover the interrupted run recorded in {path}: '
            f'{e["path"]} changed since. Reinstall jax '
            f'(pip install --force-reinstall --no-deps jax=={env.jax_version})'
            f' and delete {path}.')
    clear_pycache(env, [e['path'] for e in entries])
    if 'record' in journal:
      _write_record(sdir, journal['record'])
  os.remove(path)
  return True


def _commit(env: environment.Environment, sdir: str, command: str,
            new: dict[str, bytes | None], rec: dict | None) -> list[str]:
  """Replaces the files in site-packages with ``new`` (path -> content)."""
  journal_path = os.path.join(sdir, JOURNAL)
  entries = []
  for path, data in new.items():
    if manifest_lib.sha256_path(env.path(path)) == manifest_lib.sha256_bytes(
        data):
      continue
    target = env.path(path)
    entries.append({'path': path, 'tmp': target + TMP_SUFFIX,
                    'sha256': manifest_lib.sha256_bytes(data)})
  journal = {'command': command, 'phase': 'staging', 'files': entries,
             'record': rec}
  _write_json(journal_path, journal)
  _kill_point('journal-staging')
  for e in entries:
    data = new[e['path']]
    if data is None:
      continue
    target = env.path(e['path'])
    with open(e['tmp'], 'wb') as f:
      f.write(data)
      f.flush()
      os.fsync(f.fileno())
    if os.path.exists(target):
      shutil.copymode(target, e['tmp'])
  _kill_point('temp-written')
  journal['phase'] = 'commit'
  _write_json(journal_path, journal)
  _kill_point('journal-commit')
  crash_after = os.environ.get(CRASH_ENV)
  for i, e in enumerate(entries):
    if crash_after is not None and i >= int(crash_after):
      os._exit(86)  # pylint: disable=protected-access
    target = env.path(e['path'])
    if e['sha256'] is None:
      os.remove(target)
    else:
      os.replace(e['tmp'], target)
    if i == 0:
      _kill_point('replaced-one')
  for d in {os.path.dirname(env.path(e['path'])) for e in entries}:
    _fsync_dir(d)
  _kill_point('replaced-all')
  clear_pycache(env, [e['path'] for e in entries])
  _kill_point('pycache-cleared')
  _write_record(sdir, rec)
  _kill_point('record-written')
  os.remove(journal_path)
  return [e['path'] for e in entries]


def _pristine_contents(env: environment.Environment,
                       series: manifest_lib.Series, sdir: str,
                       wheel_dirs: tuple[str, ...]) -> dict[str, bytes | None]:
  """The released contents of the target files: from the backup or wheel."""
  expected = series.hashes[env.jax_version]
  backup = record_lib.backup_dir(sdir, env.jax_version)
  out: dict[str, bytes | None] = {}
  missing = []
  for path, states in expected.items():
    data = _read(os.path.join(backup, *path.split('/')))
    if states[0] is None:
      out[path] = None
    elif manifest_lib.sha256_bytes(data) == states[0]:
      out[path] = data
    else:
      missing.append(path)
  if missing:
    wheel = wheels.pristine_wheel(env.jax_version, wheel_dirs)
    with zipfile.ZipFile(wheel) as zf:
      for path in missing:
        out[path] = zf.read(path)
        if manifest_lib.sha256_bytes(out[path]) != expected[path][0]:
          raise errors.PatchDataError(
              f'{wheel}: {path} does not have the released sha256.')
  return out


def _stage(env: environment.Environment, status: state.Status,
           command: str, start: dict[str, bytes | None],
           goal_override: dict[str, bytes | None]
           ) -> tuple[dict[str, bytes | None], list[str]]:
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
  """
  series = status.series
  k = status.applied or 0
  n = status.total
  expected = series.hashes[env.jax_version]
  upstream = set(series.upstream.get(env.jax_version, ()))
  goal = n if command == 'apply' else 0
  if command == 'apply':
    todo = [(p, False) for p in series.patches[k:]]
  else:
    todo = [(p, True) for p in reversed(series.patches[:k])]
  skipped = [p.name for p, _ in todo if p.name in upstream]
  with tempfile.TemporaryDirectory(prefix='jax-interpret-stage-') as stage:
    for path, data in start.items():
      if data is not None:
        dest = os.path.join(stage, *path.split('/'))
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with open(dest, 'wb') as f:
          f.write(data)
    for patch, reverse in todo:
      if patch.name in upstream:
        logging.info('Skipping %s: already upstream', patch.name)
        continue
      logging.info('%s %s', 'Reverting' if reverse else 'Applying', patch.name)
      gitapply.apply(patch.path, stage, reverse=reverse)
    new: dict[str, bytes | None] = {}
    for path, states in expected.items():
      data = _read(os.path.join(stage, *path.split('/')))
      if manifest_lib.sha256_bytes(data) != states[goal]:
        raise errors.PatchDataError(
            f'After {command}, {path} has sha256 '
            f'{manifest_lib.sha256_bytes(data)} but the manifest expects '
            f'{states[goal]}; the patches and manifest disagree. Nothing '
            'was changed.')
      new[path] = goal_override.get(path, data)
  return new, skipped


def _backup(env: environment.Environment, pristine: dict[str, bytes | None],
            sdir: str) -> None:
  """Keeps a copy of the pristine files."""
  root = record_lib.backup_dir(sdir, env.jax_version)
  for path, data in pristine.items():
    if data is None:
      continue
    dest = os.path.join(root, *path.split('/'))
    if manifest_lib.sha256_path(dest) != manifest_lib.sha256_bytes(data):
      _write_bytes(dest, data)


def _displace(env: environment.Environment, status: state.Status,
              sdir: str, write: bool) -> dict[str, str]:
  """Sets aside the locally modified files (``apply --force``).

  Returns:
    Path -> sha256 of each file kept in the state directory's backup.
  """
  root = record_lib.displaced_dir(sdir, env.jax_version)
  out = {}
  for f in status.files:
    if f.applied or f.sha256 is None:
      continue
    out[f.path] = f.sha256
    if write:
      data = _read(env.path(f.path))
      _write_bytes(os.path.join(root, *f.path.split('/')), data)
  return out


def _restore_displaced(env: environment.Environment, sdir: str,
                       rec: dict | None) -> dict[str, bytes]:
  """The files that ``apply --force`` set aside, to restore on revert."""
  if not rec or rec.get('dist_version') != env.dist_version:
    return {}
  root = record_lib.displaced_dir(sdir, env.jax_version)
  out = {}
  for path, sha in rec.get('displaced', {}).items():
    data = _read(os.path.join(root, *path.split('/')))
    if manifest_lib.sha256_bytes(data) != sha:
      raise errors.ModifiedError(
          f'The locally modified {path} that apply --force kept in {root} '
          'is missing or changed; cannot restore it. Nothing was changed.')
    out[path] = data
  return out


def _record(env: environment.Environment, series: manifest_lib.Series,
            release: int, skipped: list[str],
            displaced: dict[str, str]) -> dict:
  return {
      'series': series.name,
      'release': release,
      'jax_version': env.jax_version,
      'dist_version': env.dist_version,
      'patches': [p.name for p in series.patches],
      'skipped_upstream': skipped,
      'displaced': displaced,
      'time': datetime.datetime.now(datetime.timezone.utc).isoformat(
          timespec='seconds'),
  }


def run(command: str, manifest: manifest_lib.Manifest,
        lock_timeout: float = 0.0, python: str | None = None,
        dry_run: bool = False, force: bool = False,
        wheel_dirs: tuple[str, ...] = ()) -> Result:
  """Applies or reverts the series for the target environment's jax.

  Args:
    command: ``apply`` or ``revert``.
    manifest: the loaded manifest.
    lock_timeout: seconds to wait for another run to finish.
    python: the target environment's interpreter; None for the running one.
    dry_run: check everything and report what would change; write nothing.
    force: ``apply`` only: set locally modified files aside (kept in the
      state directory; revert restores them) and patch the released files.
    wheel_dirs: directories searched for the released wheel (``--force``
      without a backup) before the cache.

  Returns:
    The result; a no-op (already patched / already pristine) is a result
    with ``changed=False``.

  Raises:
    UnsupportedError: jax missing or its version not served.
    ModifiedError: files locally modified or mixed; nothing changed.
    ConflictError: a patch does not apply; nothing changed.
    PatchDataError: patch results disagree with the manifest.
    EnvironmentProblem: git missing or site-packages read-only.
    LockedError: another run holds the lock.
  """
  if command not in ('apply', 'revert'):
    raise errors.UsageError(f'Unknown command {command!r}.')
  if force and command != 'apply':
    raise errors.UsageError('--force is only for apply.')
  env = environment.detect(python)
  before = state.classify(env, manifest)
  if before.overall in (state.Overall.NOT_INSTALLED,
                        state.Overall.UNSUPPORTED):
    raise errors.UnsupportedError(before.message)
  if before.wheel and command == 'revert':
    raise errors.UnsupportedError(
        f'{before.message} It was installed patched; to get the released '
        'jax, reinstall it: pip install --force-reinstall --no-deps '
        f'jax=={env.jax_version}')
  sdir = state_dir(env)
  noop = {'apply': state.Overall.PATCHED, 'revert': state.Overall.PRISTINE}
  journal_pending = os.path.exists(os.path.join(sdir, JOURNAL))
  stale_record = command == 'revert' and record_lib.load(sdir) is not None
  if (before.overall == noop[command] and not journal_pending
      and (dry_run or not stale_record)):
    word = 'patched' if command == 'apply' else 'pristine'
    return Result(command, False, f'Nothing to do: already {word}. '
                  + before.message, before, before, state_dir=sdir,
                  dry_run=dry_run)
  gitapply.git_executable()
  if dry_run:
    return _dry_run(env, manifest, before, command, sdir, force,
                    journal_pending, wheel_dirs)
  check_writable(env, list(before.series.files), sdir)
  lock = filelock.FileLock(os.path.join(sdir, 'lock'), timeout=lock_timeout)
  try:
    lock.acquire()
  except filelock.Timeout as e:
    raise errors.LockedError(
        f'Another run holds the lock {lock.lock_file}; retry when it '
        'finishes.') from e
  try:
    _kill_point('locked')
    recovered = recover(env, sdir)
    _kill_point('recovered')
    before = state.classify(env, manifest)
    return _locked(env, manifest, before, command, sdir, force, recovered,
                   wheel_dirs)
  finally:
    lock.release()


def _plan(env, manifest, before, command, sdir, force, wheel_dirs):
  """Returns (new contents, skipped, displaced hashes, record, pristine)."""
  rec = record_lib.load(sdir)
  modified = before.overall in (state.Overall.LOCALLY_MODIFIED,
                                state.Overall.MIXED)
  displaced: dict[str, str] = {}
  restore: dict[str, bytes | None] = {}
  pristine = None
  if modified and force:
    pristine = _pristine_contents(env, before.series, sdir, wheel_dirs)
    displaced = _displace(env, before, sdir, write=False)
    start, status = pristine, dataclasses.replace(before, applied=0)
  elif modified:
    raise errors.ModifiedError(
        f'{before.message} Refusing to {command}; nothing was changed. '
        + ('Use apply --force to set the modified files aside (revert '
           'restores them), or reinstall jax: ' if command == 'apply' else
           'To start over, reinstall jax: ')
        + f'pip install --force-reinstall --no-deps jax=={env.jax_version}')
  else:
    start = {f.path: _read(env.path(f.path)) for f in before.files}
    status = before
    if command == 'apply' and before.overall == state.Overall.PRISTINE:
      pristine = start
    if command == 'revert':
      restore = _restore_displaced(env, sdir, rec)
  new, skipped = _stage(env, status, command, start, restore)
  new_rec = None
  if command == 'apply':
    if not displaced and rec and rec.get('dist_version') == env.dist_version:
      displaced = dict(rec.get('displaced', {}))
    new_rec = _record(env, before.series, manifest.release, skipped,
                      displaced)
  return new, skipped, displaced, new_rec, pristine, restore


def _dry_run(env, manifest, before, command, sdir, force, journal_pending,
             wheel_dirs) -> Result:
  new, skipped, displaced, _, _, restore = _plan(
      env, manifest, before, command, sdir, force, wheel_dirs)
  files = [p for p, data in new.items()
           if manifest_lib.sha256_path(env.path(p))
           != manifest_lib.sha256_bytes(data)]
  goal = 'patched' if command == 'apply' else 'pristine'
  msg = (f'Dry run: {command} would replace {len(files)} file(s) and leave '
         f'jax {env.jax_version} {goal}; nothing was changed.')
  if journal_pending:
    msg += ' An interrupted run would be completed first.'
  return Result(command, False, msg, before, before, tuple(files),
                state_dir=sdir, skipped=tuple(skipped), dry_run=True,
                displaced=tuple(displaced or restore))


def _locked(env, manifest, before, command, sdir, force, recovered,
            wheel_dirs) -> Result:
  noop = {'apply': state.Overall.PATCHED, 'revert': state.Overall.PRISTINE}
  if before.overall == noop[command]:
    word = 'patched' if command == 'apply' else 'pristine'
    msg = f'Nothing to do: already {word}. ' + before.message
    if command == 'revert' and record_lib.load(sdir) is not None:
      _write_record(sdir, None)
      msg += ' Forgot the record of an earlier apply.'
    if recovered:
      msg = 'Completed an interrupted run. ' + msg
    after = state.classify(env, manifest)
    return Result(command, False, msg, before, after, (), recovered, sdir)
  new, skipped, displaced, rec, pristine, restore = _plan(
      env, manifest, before, command, sdir, force, wheel_dirs)
  _kill_point('staged')
  if pristine is not None:
    _backup(env, pristine, sdir)
  if command == 'apply' and force:
    _displace(env, before, sdir, write=True)
  _kill_point('backed-up')
  changed = _commit(env, sdir, command, new, rec)
  after = state.classify(env, manifest)
  goal = noop[command]
  if restore:
    goal = state.Overall.LOCALLY_MODIFIED
  if after.overall != goal:
    raise errors.MigrationError(
        f'After {command} the state is {after.overall}: {after.message}')
  verb = 'Applied' if command == 'apply' else 'Reverted'
  k = 0 if displaced and command == 'apply' else before.applied or 0
  steps = after.total - k if command == 'apply' else k
  steps -= len(skipped)
  msg = f'{verb} {steps} patch(es) of {before.series.name}.'
  if skipped:
    msg += f' Skipped (already upstream): {", ".join(skipped)}.'
  if displaced and command == 'apply':
    msg += (' Set aside the locally modified ' + ', '.join(displaced)
            + ' (revert restores them).')
  if restore:
    msg += ' Restored the locally modified ' + ', '.join(restore) + '.'
  msg += ' ' + after.message
  return Result(command, True, msg, before, after, tuple(changed),
                recovered, sdir, tuple(skipped),
                displaced=tuple(displaced if command == 'apply' else restore))
