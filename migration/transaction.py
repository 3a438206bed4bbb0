"""All-or-nothing apply and revert of a series in site-packages.

A run classifies the target files once (again under the lock only if another
run changed them meanwhile), checks the state directory (``statedir``: the
install's own folder, private; its journal and record well-formed), then
(unless ``--dry_run``) checks that this user owns the install and that no
other user can change a folder it writes in (``trust``), takes the
install's lock and the lock in its state folder, adopts an older release's
state of this install, settles an interrupted run (below),
removes what killed runs left behind, probes that every target file and its
directories can be replaced (``chattr +i``, a read-only mount: exit 5), and
computes one ``plan.Plan``: every new content staged with git apply and
checked against the manifest before anything is written. The pristine
files are backed up; then the commit:

1. For every file that changes, two temporary files are written beside it
   (created exclusively, fsynced): its current and its new content.
2. The journal (``journal.py``) is written: phase ``commit``.
3. Each file is replaced, compare and swap (``journal.move``): a file that
   another process changed since the plan read it is left as it is and the
   run is undone (exit 4); stale ``__pycache__`` entries are removed; the
   record is written.
4. The temporary files and the journal are removed.

Recovery rules:

* An error (a file that cannot be replaced, a full disk, ...) before step 2
  removes the temporary files; after it, every replaced file is put back
  from its temporary copy. Either way the run exits 5 with nothing changed.
* A run killed before step 2 changed nothing in site-packages; its
  temporary files (and probe files) start with ``fsutil.TMP_PREFIX`` and
  are removed by the next run, under the lock.
* A run killed after step 2 is settled by the next run from the journal:
  rolled forward when every new content is at hand, else rolled back; a
  replace that fails turns it around (``journal.settle``). If the next run
  is the same command and it rolled forward, there is nothing more to do.
* SIGINT, SIGTERM or SIGHUP (``interrupt.py``) during the commit, or
  while settling an interrupted run, waits for it to end; elsewhere it
  stops the run at once, removing its temporary files. The run then exits
  128 + the signal's number with jax at one end.
* Scratch directories in ``$TMPDIR`` hold a lock of the process that made
  them and are removed by a later run once that process is gone, in any
  PID namespace (``fsutil.sweep_scratch``).

Every path comes from the manifest or the journal and must resolve inside
site-packages/jax (``Environment.path``), else the run exits 7.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import glob
import json
import os
import signal
import stat

from absl import logging

from migration import environment
from migration import errors
from migration import fsutil
from migration import gitapply
from migration import interrupt
from migration import journal as journal_lib
from migration import manifest as manifest_lib
from migration import plan as plan_lib
from migration import record as record_lib
from migration import state
from migration import statedir
from migration import trust

STATE_DIR_ENV = record_lib.STATE_DIR_ENV
# Testing only: exit abruptly after this many files were replaced.
CRASH_ENV = 'JAX_INTERPRET_PATCHES_TEST_CRASH_AFTER'
# Testing only: SIGKILL the run itself when it reaches this step.
KILL_ENV = 'JAX_INTERPRET_PATCHES_TEST_KILL_AT'
# Testing only: STEP:N sends the run signal N when it reaches STEP.
SIGNAL_ENV = 'JAX_INTERPRET_PATCHES_TEST_SIGNAL_AT'
JOURNAL = journal_lib.JOURNAL

state_dir = record_lib.state_dir


def steps(n_files: int) -> tuple[str, ...]:
  """The steps ``KILL_ENV`` can name, in the order a run reaches them.

  Args:
    n_files: how many files the run replaces (``replaced-1`` ...).
  """
  return ('probed', 'locked', 'recovered', 'probed-target', 'staged',
          'backed-up', 'temp-written', 'journal-commit',
          *(f'replaced-{i}' for i in range(1, n_files + 1)),
          'replaced-all', 'pycache-cleared', 'record-written')


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
  """Testing only: signals (or ends) this process at ``step`` if asked to.

  A ``SIGNAL_ENV`` value whose signal is not a signal number (``probed:abc``)
  is ignored, with a warning: never an error in the middle of a run.
  """
  if os.environ.get(KILL_ENV) == step:
    os.kill(os.getpid(), signal.SIGKILL)
  at, _, signum = os.environ.get(SIGNAL_ENV, '').rpartition(':')
  if at == step:
    try:
      os.kill(os.getpid(), int(signum))
    except (ValueError, OverflowError, OSError):
      logging.warning('Ignoring %s=%s: not STEP:SIGNAL_NUMBER.', SIGNAL_ENV,
                      os.environ.get(SIGNAL_ENV))
  crash_after = os.environ.get(CRASH_ENV)
  if crash_after is not None and step == f'replaced-{crash_after}':
    os._exit(86)  # pylint: disable=protected-access


# errno values that mean a file can never be replaced by this run.
_UNREPLACEABLE = (errno.EPERM, errno.EROFS, errno.ETXTBSY, errno.EBUSY)


def _probe_file(path: str) -> str | None:
  """Returns why file ``path`` cannot be replaced, or None.

  Opening for writing (without truncating) changes nothing; it fails for an
  immutable or append-only file and on a read-only mount.
  """
  try:
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
  except FileNotFoundError:
    return None
  except OSError as e:
    if e.errno in _UNREPLACEABLE or e.errno == errno.ELOOP:
      return e.strerror or str(e)
    return None  # E.g. mode 0444 in a writable directory: replaceable.
  os.close(fd)
  return None


def _probe_dir(directory: str, step: str = 'probed') -> str | None:
  """Returns why ``directory`` is not writable, or None if it is."""
  try:
    path = fsutil.write_temp(directory, b'')
  except OSError as e:
    return e.strerror or str(e)
  try:
    _kill_point(step)
  finally:
    fsutil.remove(path)  # A run holding the lock may have swept it.
  return None


def _make_state_dir(env: environment.Environment) -> str:
  """Creates the install's state folder, 0700, and checks it is writable.

  Returns:
    The folder.

  Raises:
    EnvironmentProblem: it cannot be created or written, or is unsafe
      (``statedir.check_dir``).
  """
  sdir = statedir.make(env)
  why = _probe_dir(sdir)
  if why:
    raise errors.EnvironmentProblem(
        f'The state directory {sdir} is not writable ({why}). Nothing was '
        'changed.')
  return sdir


def check_writable(env: environment.Environment, files) -> None:
  """Checks that every target file and its directories can be written.

  Raises:
    EnvironmentProblem: a file cannot be replaced or a directory is
      read-only (names it).
    PatchDataError: a file is not inside site-packages/jax.
  """
  paths = [env.path(f) for f in files]
  checks = [(p, _probe_file) for p in paths]
  for p in paths:
    d = os.path.dirname(p)
    checks.append((d, _probe_dir))
    if os.path.isdir(os.path.join(d, '__pycache__')):
      checks.append((os.path.join(d, '__pycache__'), _probe_dir))
  for path, probe in dict.fromkeys(checks):
    why = (probe(path, 'probed-target') if probe is _probe_dir
           else probe(path))
    if why:
      raise errors.EnvironmentProblem(
          f'{path} is not writable ({why}); site-packages '
          f'{env.site_packages} must be writable to patch jax in place. '
          'Nothing was changed. Use a virtualenv you own, or run with '
          'sufficient permissions.')


def clear_pycache(env: environment.Environment, files) -> None:
  """Removes the cached bytecode of the given modules."""
  for f in files:
    d, name = os.path.split(env.path(f))
    stem = os.path.splitext(name)[0]
    for pyc in glob.glob(os.path.join(glob.escape(d), '__pycache__',
                                      glob.escape(stem) + '.*.pyc')):
      logging.info('Removing %s', pyc)
      fsutil.remove(pyc)


def _write_record(sdir: str, rec: dict | None) -> None:
  if rec is None:
    fsutil.remove(os.path.join(sdir, record_lib.RECORD))
  else:
    fsutil.write_atomic(sdir, record_lib.RECORD,
                        json.dumps(rec, indent=2).encode())


def _write_dirs(env: environment.Environment, files) -> list[str]:
  """The folders a run writes in: the target files' folders, their
  ``__pycache__``, the state root and the install's state folder
  (``trust.check_folders``)."""
  dirs = []
  for f in files:
    d = os.path.dirname(env.path(f))
    dirs += [d, os.path.join(d, '__pycache__')]
  dirs += [statedir.root_dir(env), statedir.install_dir(env)]
  return dirs


def _sweep_dirs(env: environment.Environment, files, sdir: str) -> list[str]:
  """The directories that hold the tool's temporary files."""
  dirs = []
  for f in files:
    d = os.path.dirname(env.path(f))
    dirs += [d, os.path.join(d, '__pycache__')]
  dirs.append(sdir)
  for root, _, _ in os.walk(os.path.join(sdir, 'backup')):
    dirs.append(root)
  return dirs


def recover(env: environment.Environment,
            sdir: str) -> journal_lib.Journal | None:
  """Settles a run that was killed; call under the lock.

  The journal is this install's, or one that ``journal.adopt_moved``
  finds of a run killed before the venv moved. One of a run on another
  jax version (jax reinstalled since) is dropped with its temporary files.

  Returns:
    The interrupted run's journal (None if there was none, or it was
    dropped), with ``phase`` set to ``commit`` if it was rolled forward,
    ``rollback`` if back.

  Raises:
    PatchDataError: the journal is unusable.
    ModifiedError: the files changed since the interrupted run.
    EnvironmentProblem: a file cannot be replaced either way.
  """
  where = journal_lib.path(sdir)
  if not os.path.lexists(where):
    try:
      moved_from = journal_lib.adopt_moved(env, sdir)
    except OSError as e:
      raise errors.EnvironmentProblem(
          f'Cannot move the journal of an interrupted run into {sdir}: '
          f'{e}. Nothing was changed.') from e
    if moved_from:
      logging.warning('Took the journal %s of a run interrupted before the '
                      'install moved.', moved_from)
  journal = journal_lib.load(sdir, env)
  if journal is None:
    return None
  if journal.dist_version not in (None, env.dist_version):
    # jax was reinstalled since: the run's files are gone, its temporary
    # files are not jax's, and there is nothing to settle.
    with interrupt.deferred():
      try:
        journal_lib.remove_temps(env, journal)
        os.remove(where)
      except OSError as e:
        raise errors.EnvironmentProblem(
            f'Cannot remove the journal {where} of a run interrupted on jax '
            f'{journal.dist_version} (jax {env.dist_version} was installed '
            f'since), or its temporary files: {e}') from e
    logging.warning('Dropped the journal of a %s interrupted on jax %s; '
                    'jax %s was installed since.', journal.command,
                    journal.dist_version, env.dist_version)
    return None
  logging.warning('Settling an interrupted %s.', journal.command)
  with interrupt.deferred():  # A signal waits for the settling to end.
    forward = journal_lib.settle(env, journal, _kill_point, where)
    try:
      clear_pycache(env, [e.path for e in journal.entries])
      if forward:
        _write_record(sdir, journal.record)
      journal_lib.remove_temps(env, journal)
      os.remove(journal_lib.path(sdir))
    except OSError as e:
      raise errors.EnvironmentProblem(
          f'Cannot finish settling the interrupted {journal.command}: '
          f'{e}') from e
  return dataclasses.replace(journal,
                             phase='commit' if forward else 'rollback')


def _unchanged(status: state.Status) -> bool:
  """Whether the target files still have the hashes ``status`` saw."""
  return all(manifest_lib.sha256_path(status.env.path(f.path)) == f.sha256
             for f in status.files)


def _keep(plan: plan_lib.Plan) -> None:
  """Backs up the pristine files and sets the modified ones aside."""
  version = plan.env.jax_version
  for path, data in (plan.backup or {}).items():
    dest = os.path.join(record_lib.backup_dir(plan.sdir, version),
                        *path.split('/'))
    if data is not None and (manifest_lib.sha256_path(dest)
                             != manifest_lib.sha256_bytes(data)):
      fsutil.write_atomic(plan.sdir, f'backup/{version}/{path}', data)
  for path, data in plan.aside.items():
    fsutil.write_atomic(plan.sdir, f'backup/{version}/displaced/{path}', data)


def _write_temps(plan: plan_lib.Plan) -> journal_lib.Journal:
  """Step 1 and 2 of the commit: the temporary files and the journal.

  Raises:
    OSError: after removing what it wrote.
  """
  entries: list[journal_lib.Entry] = []
  made: list[str] = []
  try:
    for path in plan.files:
      target = plan.env.path(path)
      directory = os.path.dirname(target)
      old, new = plan.old[path], plan.new[path]
      # A new file gets its directory's owner, a replaced one keeps its
      # owner, group and mode.
      st = os.stat(target if old is not None else directory)
      mode = stat.S_IMODE(st.st_mode) if old is not None else 0o644
      names = []
      for data in (old, new):
        if data is None:
          names.append(None)
        else:
          made.append(fsutil.write_temp(directory, data, mode,
                                        (st.st_uid, st.st_gid)))
          names.append(os.path.basename(made[-1]))
      entries.append(journal_lib.Entry(
          path, manifest_lib.sha256_bytes(old), manifest_lib.sha256_bytes(new),
          *names))
    _kill_point('temp-written')
    journal = journal_lib.Journal(plan.command, 'commit', tuple(entries),
                                  plan.record, statedir.jax_dir(plan.env),
                                  plan.env.dist_version)
    journal_lib.write(plan.sdir, journal)
  except BaseException:
    for p in made:
      fsutil.remove(p)
    fsutil.remove(journal_lib.path(plan.sdir))
    raise
  return journal


def _roll_back(plan: plan_lib.Plan, journal: journal_lib.Journal,
               error: Exception) -> errors.MigrationError:
  """Puts back every replaced file after ``error``; returns the error.

  A file another process changed meanwhile is left as that process left it.
  """
  journal = dataclasses.replace(journal, phase='rollback')
  with contextlib.suppress(OSError):
    journal_lib.write(plan.sdir, journal)
  try:
    left = journal_lib.move(plan.env, journal, False, _kill_point,
                            strict=False)
    with contextlib.suppress(OSError):
      clear_pycache(plan.env, plan.files)
    journal_lib.remove_temps(plan.env, journal)
    os.remove(journal_lib.path(plan.sdir))
  except OSError as e:
    return errors.EnvironmentProblem(
        f'{plan.command} failed ({error}) and undoing it failed too ({e}); '
        'the next run finishes or undoes it from the journal.')
  if isinstance(error, journal_lib.ChangedError):
    others = [p for p in left if p != error.relpath]
    return errors.ModifiedError(
        f'Cannot {plan.command}: {error}'
        + (f' So were {", ".join(others)}.' if others else '')
        + ' Every file this run had replaced was put back. Check jax with '
        '`python -m migration status`.')
  return errors.EnvironmentProblem(
      f'Cannot {plan.command}: {error}. Every replaced file was put back; '
      'nothing was changed.')


def _commit(plan: plan_lib.Plan) -> None:
  """Replaces the files in site-packages, all or nothing (module doc).

  Raises:
    EnvironmentProblem: a write failed; nothing was changed.
    ModifiedError: another process changed a file meanwhile; it is left as
      that process left it, every other file as it was.
  """
  with interrupt.deferred():  # A signal waits for the commit to end.
    try:
      journal = _write_temps(plan)
    except OSError as e:
      raise errors.EnvironmentProblem(
          f'Cannot {plan.command}: {e}. Nothing was changed.') from e
    _kill_point('journal-commit')
    if os.environ.get(CRASH_ENV) == '0':
      os._exit(86)  # pylint: disable=protected-access
    try:
      journal_lib.move(plan.env, journal, True, _kill_point)
      _kill_point('replaced-all')
      clear_pycache(plan.env, plan.files)
      _kill_point('pycache-cleared')
      _write_record(plan.sdir, plan.record)
    except (OSError, journal_lib.ChangedError) as e:
      raise _roll_back(plan, journal, e) from e
    _kill_point('record-written')
    with contextlib.suppress(OSError):
      journal_lib.remove_temps(plan.env, journal)
      os.remove(journal_lib.path(plan.sdir))


def _dry_run(plan: plan_lib.Plan, journal_pending: bool) -> Result:
  goal = 'patched' if plan.command == 'apply' else 'pristine'
  msg = (f'Dry run: {plan.command} would replace {len(plan.files)} file(s) '
         f'and leave jax {plan.env.jax_version} {goal}; nothing was changed.')
  if journal_pending:
    msg += ' An interrupted run would be completed first.'
  return Result(plan.command, False, msg, plan.before, plan.before,
                plan.files, state_dir=plan.sdir, skipped=plan.skipped,
                dry_run=True, displaced=tuple(plan.displaced))


def _execute(plan: plan_lib.Plan, manifest: manifest_lib.Manifest,
             recovered: bool) -> Result:
  """Writes the plan: backup, then the commit; checks the outcome."""
  try:
    _keep(plan)
  except OSError as e:
    raise errors.EnvironmentProblem(
        f'Cannot write to the state directory {plan.sdir}: {e}. Nothing '
        'was changed.') from e
  _kill_point('backed-up')
  _commit(plan)
  after = state.classify(plan.env, manifest)
  if after.overall != plan.goal:
    # Every file was at its new content when it was replaced (compare and
    # swap): another process changed one since, and it is kept as it is.
    raise errors.ModifiedError(
        f'The {plan.command} completed, but a file changed right after it '
        f'was replaced (an editor saving it, or a pip install?): '
        f'{after.message}')
  before, command = plan.before, plan.command
  k = before.applied or 0
  steps_done = (after.total - k if command == 'apply' else k)
  steps_done -= len(plan.skipped)
  verb = 'Applied' if command == 'apply' else 'Reverted'
  msg = f'{verb} {steps_done} patch(es) of {before.series.name}.'
  if command == 'revert' and not steps_done and before.leftover:
    msg = ('Removed what an earlier apply left after jax was reinstalled: '
           f'{", ".join(before.leftover)}.')
  if recovered:
    msg = 'Undid an interrupted run. ' + msg
  if plan.skipped:
    msg += f' Skipped (already upstream): {", ".join(plan.skipped)}.'
  if plan.aside:
    msg += (' Set aside the locally modified ' + ', '.join(plan.aside)
            + ' (revert restores them).')
  if command == 'revert' and plan.displaced:
    msg += ' Restored the locally modified ' + ', '.join(plan.displaced) + '.'
  msg += ' ' + after.message
  return Result(command, True, msg, before, after, plan.files, recovered,
                plan.sdir, plan.skipped, displaced=tuple(plan.displaced))


def _legacy_claims(status: state.Status) -> tuple[bool, bool]:
  """The state files of an older release this install owns (``statedir``)."""
  env = status.env
  patched = status.overall in (state.Overall.PATCHED,
                               state.Overall.PARTLY_PATCHED,
                               state.Overall.OUTDATED)
  return statedir.legacy_claims(
      env, patched, lambda data: journal_lib.temp_paths(data, env))


def _check_state(status: state.Status, sdir: str) -> tuple[bool, bool]:
  """Checks the state root and ``sdir``, its lock, journal and record, as
  every run does before it reads or writes any (``statedir``).

  Returns:
    The claims on an older release's state (``_legacy_claims``).

  Raises:
    EnvironmentProblem: a folder or file is unsafe (a link, a FIFO, another
      user's).
    PatchDataError: the journal or record is unusable.
  """
  env = status.env
  claims = _legacy_claims(status)  # Checks the root.
  statedir.check_dir(sdir, env)
  statedir.check_file(os.path.join(sdir, statedir.LOCK), env)
  journal_lib.load(sdir, env)
  record_lib.load(sdir, env)
  return claims


def inspect_state(status: state.Status) -> tuple[bool, str | None]:
  """For status: whether a run was interrupted, and what is wrong with the
  state directory (what apply and revert would refuse), read only.

  Returns:
    ``(interrupted, problem)``; ``problem`` is None, or the error message
    with its exit code.
  """
  env = status.env
  if env.site_packages is None or not env.jax_installed:
    return False, None
  sdir = state_dir(env)
  interrupted = os.path.lexists(journal_lib.path(sdir))
  try:
    interrupted = _check_state(status, sdir)[0] or interrupted
    journal = journal_lib.load(sdir, env)
  except errors.MigrationError as e:
    return interrupted, (f'{e} (apply and revert exit '
                         f'{int(e.exit_code)})')
  if journal is not None and journal.dist_version not in (
      None, env.dist_version):
    interrupted = False  # Of a jax replaced since: dropped, not settled.
  if journal is None and journal_lib.find_moved(env, sdir) is not None:
    interrupted = True  # Killed before the venv moved.
  return interrupted, None


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
    UsageError: bad command or flags.
    UnsupportedError: jax missing or its version not served.
    ModifiedError: files locally modified or mixed; nothing changed.
    ConflictError: a patch does not apply; nothing changed.
    PatchDataError: patch data, manifest or journal unusable, or a path
      outside site-packages/jax; nothing changed.
    EnvironmentProblem: git missing, a file or directory not writable, a
      full disk, ...; nothing changed.
    LockedError: another run holds the lock.
  """
  if command not in ('apply', 'revert'):
    raise errors.UsageError(f'Unknown command {command!r}.')
  if force and command != 'apply':
    raise errors.UsageError('--force is only for apply.')
  fsutil.sweep_scratch()
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
  claims = _check_state(before, sdir)
  journal_pending = os.path.lexists(journal_lib.path(sdir)) or claims[0]
  stale_record = command == 'revert' and (
      record_lib.load(sdir, env) is not None or claims[1])
  stale_temps = bool(fsutil.leftovers(
      _sweep_dirs(env, before.series.files, sdir)))
  word = 'patched' if command == 'apply' else 'pristine'
  if (before.overall == noop[command] and not journal_pending
      and not before.leftover
      and (dry_run or not (stale_record or stale_temps))):
    return Result(command, False, f'Nothing to do: already {word}. '
                  + before.message, before, before, state_dir=sdir,
                  dry_run=dry_run)
  gitapply.git_executable()
  if dry_run:
    # An older release's record this run would adopt is read where it is.
    read_dir = statedir.root_dir(env) if claims[1] else sdir
    return _dry_run(plan_lib.make(command, before, read_dir, manifest.release,
                                  force, wheel_dirs), journal_pending)
  trust.require_owner(env, command)
  trust.check_folders(env, _write_dirs(env, before.series.files))
  _make_state_dir(env)
  with statedir.install_locked(env, lock_timeout):
    return _run_locked(command, manifest, env, before, sdir, lock_timeout,
                       force, wheel_dirs)


def _keep_orphans(env: environment.Environment, status: state.Status,
                  sdir: str) -> None:
  """Refuses to sweep the temporary files of a run whose journal is away.

  Call when ``recover`` found no journal. Files at different points of the
  series beside the tool's temporary files are a run killed in its commit
  whose journal is in another state root (another
  ``$JAX_INTERPRET_PATCHES_STATE_DIR``, or another path to this jax, e.g.
  a bind mount): those temporary files are its only copies, so they are
  kept (``apply --force`` sweeps them).

  Args:
    env: the target environment.
    status: its files' state now.
    sdir: its state folder.

  Raises:
    ModifiedError: such files are there.
  """
  if status.overall not in (state.Overall.MIXED,
                            state.Overall.PARTLY_PATCHED):
    return
  assert status.series is not None
  orphans = fsutil.leftovers(
      os.path.dirname(env.path(f)) for f in status.series.files)
  if orphans:
    raise errors.ModifiedError(
        f'jax\'s files are at different points of the series, and '
        f'{len(orphans)} temporary file(s) of an interrupted run are beside '
        f'them (e.g. {orphans[0]}), but its journal is not in {sdir}: '
        'that run had another state root (another '
        f'{STATE_DIR_ENV}, or it reached this jax by another path, e.g. a '
        'bind mount or a container\'s). Run the tool as that run was run '
        'to finish or undo it; or reinstall jax (pip install '
        f'--force-reinstall --no-deps jax=={env.jax_version}), or apply '
        '--force. Nothing was changed.')


def _run_locked(command: str, manifest: manifest_lib.Manifest,
                env: environment.Environment, before: state.Status,
                sdir: str, lock_timeout: float, force: bool,
                wheel_dirs: tuple[str, ...]) -> Result:
  """The part of ``run`` under the install's lock."""
  noop = {'apply': state.Overall.PATCHED, 'revert': state.Overall.PRISTINE}
  word = 'patched' if command == 'apply' else 'pristine'
  with statedir.locked(sdir, env, lock_timeout):
    _kill_point('locked')
    statedir.adopt_legacy(env, _legacy_claims(before), lock_timeout)
    interrupted = recover(env, sdir)
    _kill_point('recovered')
    if interrupted is not None or not _unchanged(before):
      before = state.classify(env, manifest)  # Another run changed them.
    if interrupted is None and not force:
      _keep_orphans(env, before, sdir)
    try:
      fsutil.sweep(_sweep_dirs(env, before.series.files, sdir))
    except OSError as e:
      raise errors.EnvironmentProblem(
          f'Cannot remove temporary files of an earlier run: {e}') from e
    if interrupted is not None:
      if (interrupted.command == command and interrupted.phase == 'commit'):
        return Result(command, True,
                      f'Completed an interrupted {command}. '
                      + before.message, before, before,
                      tuple(e.path for e in interrupted.entries), True, sdir)
    if before.overall == noop[command] and not before.leftover:
      msg = f'Nothing to do: already {word}. ' + before.message
      if command == 'revert' and record_lib.load(sdir, env) is not None:
        try:
          _write_record(sdir, None)
        except OSError as e:
          raise errors.EnvironmentProblem(str(e)) from e
        msg += ' Forgot the record of an earlier apply.'
      if interrupted is not None:
        msg = 'Settled an interrupted run. ' + msg
      return Result(command, interrupted is not None, msg, before, before,
                    (), interrupted is not None, sdir)
    # After recovery, which may have to roll back past an obstacle.
    check_writable(env, before.series.files)
    plan = plan_lib.make(command, before, sdir, manifest.release, force,
                     wheel_dirs)
    _kill_point('staged')
    return _execute(plan, manifest, interrupted is not None)
