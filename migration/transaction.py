"""All-or-nothing apply and revert of a series in site-packages.

Steps: classify the files; lock; recover an interrupted run from its
journal; copy the target files to a staging directory; apply (or
reverse-apply) the remaining patches there with git apply; verify every
staged hash against the manifest; write same-directory temp files; journal;
``os.replace`` each file; clear stale ``__pycache__``; drop the journal.

A run killed before the journal reaches its commit phase left site-packages
untouched (temp files are removed on the next run); one killed during the
commit phase is rolled forward on the next run, since every temp file was
complete and verified before the first replace.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import json
import os
import shutil
import tempfile

from absl import logging
import filelock

from migration import environment
from migration import errors
from migration import gitapply
from migration import manifest as manifest_lib
from migration import state

STATE_DIR_ENV = 'JAX_INTERPRET_PATCHES_STATE_DIR'
# Testing only: exit abruptly after this many files were replaced.
CRASH_ENV = 'JAX_INTERPRET_PATCHES_TEST_CRASH_AFTER'
JOURNAL = 'journal.json'
TMP_SUFFIX = '.jax-interpret-patches.tmp'


@dataclasses.dataclass(frozen=True)
class Result:
  """Outcome of apply or revert.

  Attributes:
    command: ``apply`` or ``revert``.
    changed: whether files in site-packages were replaced.
    message: one-line summary.
    before: status before the run.
    after: status after the run.
    files: the files that were replaced or removed.
    recovered: whether an interrupted run was recovered first.
    state_dir: directory holding the lock, journal and backup.
  """
  command: str
  changed: bool
  message: str
  before: state.Status
  after: state.Status
  files: tuple[str, ...] = ()
  recovered: bool = False
  state_dir: str | None = None


def state_dir(env: environment.Environment) -> str:
  """Returns the directory for the lock file, journal and pristine backup.

  ``$JAX_INTERPRET_PATCHES_STATE_DIR`` if set; otherwise
  ``<site-packages>/../.jax-interpret-patches``, falling back to a per
  site-packages directory in the user cache when that parent is read-only.
  """
  override = os.environ.get(STATE_DIR_ENV)
  if override:
    return os.path.abspath(override)
  assert env.site_packages is not None
  parent = os.path.dirname(env.site_packages)
  if os.access(parent, os.W_OK):
    return os.path.join(parent, '.jax-interpret-patches')
  xdg = os.environ.get('XDG_CACHE_HOME') or os.path.expanduser('~/.cache')
  key = hashlib.sha256(env.site_packages.encode()).hexdigest()[:16]
  return os.path.join(xdg, 'jax-interpret-patches', 'state', key)


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


def _write_json(path: str, data: dict) -> None:
  tmp = path + '.tmp'
  with open(tmp, 'w', encoding='utf-8') as f:
    json.dump(data, f, indent=2)
    f.flush()
    os.fsync(f.fileno())
  os.replace(tmp, path)
  _fsync_dir(os.path.dirname(path))


def clear_pycache(env: environment.Environment, files: list[str]) -> None:
  """Removes the cached bytecode of the given modules."""
  for f in files:
    d, name = os.path.split(env.path(f))
    stem = os.path.splitext(name)[0]
    for pyc in glob.glob(os.path.join(glob.escape(d), '__pycache__',
                                      glob.escape(stem) + '.*.pyc')):
      logging.info('Removing %s', pyc)
      os.remove(pyc)


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
  os.remove(path)
  return True


def _commit(env: environment.Environment, sdir: str, command: str,
            new: dict[str, bytes | None]) -> list[str]:
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
  journal = {'command': command, 'phase': 'staging', 'files': entries}
  _write_json(journal_path, journal)
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
  journal['phase'] = 'commit'
  _write_json(journal_path, journal)
  crash_after = os.environ.get(CRASH_ENV)
  for i, e in enumerate(entries):
    if crash_after is not None and i >= int(crash_after):
      os._exit(86)  # pylint: disable=protected-access
    target = env.path(e['path'])
    if e['sha256'] is None:
      os.remove(target)
    else:
      os.replace(e['tmp'], target)
  for d in {os.path.dirname(env.path(e['path'])) for e in entries}:
    _fsync_dir(d)
  clear_pycache(env, [e['path'] for e in entries])
  os.remove(journal_path)
  return [e['path'] for e in entries]


def _stage(env: environment.Environment, status: state.Status,
           command: str) -> dict[str, bytes | None]:
  """Returns the verified new contents of every target file."""
  series = status.series
  assert series is not None and status.applied is not None
  k, n = status.applied, status.total
  expected = series.hashes[env.jax_version]
  goal = n if command == 'apply' else 0
  with tempfile.TemporaryDirectory(prefix='jax-interpret-stage-') as stage:
    for path in expected:
      if os.path.exists(env.path(path)):
        dest = os.path.join(stage, *path.split('/'))
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(env.path(path), dest)
    if command == 'apply':
      steps = [(p, False) for p in series.patches[k:]]
    else:
      steps = [(p, True) for p in reversed(series.patches[:k])]
    for patch, reverse in steps:
      logging.info('%s %s', 'Reverting' if reverse else 'Applying', patch.name)
      gitapply.apply(patch.path, stage, reverse=reverse)
    new: dict[str, bytes | None] = {}
    for path, states in expected.items():
      staged = os.path.join(stage, *path.split('/'))
      data = None
      if os.path.exists(staged):
        with open(staged, 'rb') as f:
          data = f.read()
      if manifest_lib.sha256_bytes(data) != states[goal]:
        raise errors.PatchDataError(
            f'After {command}, {path} has sha256 '
            f'{manifest_lib.sha256_bytes(data)} but the manifest expects '
            f'{states[goal]}; the patches and manifest disagree. Nothing '
            'was changed.')
      new[path] = data
  return new


def _backup(env: environment.Environment, status: state.Status,
            sdir: str) -> None:
  """Keeps a copy of the pristine files (only from a pristine state)."""
  root = os.path.join(sdir, 'backup', env.jax_version or '')
  for f in status.files:
    if f.sha256 is None:
      continue
    dest = os.path.join(root, *f.path.split('/'))
    if manifest_lib.sha256_path(dest) == f.sha256:
      continue
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    shutil.copyfile(env.path(f.path), dest + '.tmp')
    os.replace(dest + '.tmp', dest)


def run(command: str, manifest: manifest_lib.Manifest,
        lock_timeout: float = 0.0) -> Result:
  """Applies or reverts the series for the running Python's jax.

  Args:
    command: ``apply`` or ``revert``.
    manifest: the loaded manifest.
    lock_timeout: seconds to wait for another run to finish.

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
  env = environment.detect()
  before = state.classify(env, manifest)
  if before.overall in (state.Overall.NOT_INSTALLED,
                        state.Overall.UNSUPPORTED):
    raise errors.UnsupportedError(before.message)
  sdir = state_dir(env)
  noop = {'apply': state.Overall.PATCHED, 'revert': state.Overall.PRISTINE}
  journal_pending = os.path.exists(os.path.join(sdir, JOURNAL))
  if before.overall == noop[command] and not journal_pending:
    word = 'patched' if command == 'apply' else 'pristine'
    return Result(command, False, f'Nothing to do: already {word}. '
                  + before.message, before, before, state_dir=sdir)
  gitapply.git_executable()
  check_writable(env, list(before.series.files), sdir)
  lock = filelock.FileLock(os.path.join(sdir, 'lock'), timeout=lock_timeout)
  try:
    lock.acquire()
  except filelock.Timeout as e:
    raise errors.LockedError(
        f'Another run holds the lock {lock.lock_file}; retry when it '
        'finishes.') from e
  try:
    recovered = recover(env, sdir)
    before = state.classify(env, manifest)
    if before.overall in (state.Overall.LOCALLY_MODIFIED,
                          state.Overall.MIXED):
      raise errors.ModifiedError(
          f'{before.message} Refusing to {command}; nothing was changed. '
          'To start over, reinstall jax: pip install --force-reinstall '
          f'--no-deps jax=={env.jax_version}')
    if before.overall == noop[command]:
      word = 'patched' if command == 'apply' else 'pristine'
      msg = f'Nothing to do: already {word}. ' + before.message
      if recovered:
        msg = 'Completed an interrupted run. ' + msg
      return Result(command, False, msg, before, before, (), recovered,
                    sdir)
    new = _stage(env, before, command)
    if command == 'apply' and before.overall == state.Overall.PRISTINE:
      _backup(env, before, sdir)
    changed = _commit(env, sdir, command, new)
    after = state.classify(env, manifest)
    goal = noop[command]
    if after.overall != goal:
      raise errors.MigrationError(
          f'After {command} the state is {after.overall}: {after.message}')
    verb = 'Applied' if command == 'apply' else 'Reverted'
    steps = (after.total - before.applied if command == 'apply'
             else before.applied)
    msg = f'{verb} {steps} patch(es) of {before.series.name}. {after.message}'
    return Result(command, True, msg, before, after, tuple(changed),
                  recovered, sdir)
  finally:
    lock.release()
