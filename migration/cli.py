"""Patch jax's Pallas TPU interpreter in place, reversibly, or build a wheel.

Usage: python -m migration COMMAND [--json] [flags]
   or: jax-interpret-patches COMMAND [--json] [flags]

The target environment is the running Python's, or the one of --python PATH.
jax is never imported; its version is read from the installed metadata (a
patched wheel's version 0.12.0.1+interpret.N counts as 0.12.0.1).

Commands:
  status    The jax version, the serving patch series, the state of every
            patch (applied, not applied, merged upstream, conflicting) and
            file (pristine, patched k/n, locally modified), and whether
            patches this tool applied were lost (jax reinstalled/upgraded).
  check     The compatibility table (release x patch: applies, not
            applicable, upstream or conflict; the jaxlib and Python each
            release needs), then whether each patch applies exactly, only
            with offsets, is already upstream, or conflicts (which hunk,
            what it expected), on the released files of the installed jax,
            or of --version V (repeatable), or of every served version
            (--all: details of conflicts only). --readme=FILE (with --all)
            rewrites the table in FILE (this repository's is
            docs/compatibility.md).
  apply     Apply the series (or its remaining patches), all-or-nothing;
            patches already upstream are skipped. Already patched: nothing
            to do. --dry_run: report only. --force: set locally modified
            files aside (revert restores them) and patch the released ones.
            Prints what it did and the files it replaced; --verbose adds
            the status table.
  revert    Restore the released files byte for byte (and files set aside
            by apply --force). Already pristine: nothing to do.
  wheel     Build jax-V+interpret.N-py3-none-any.whl from the released wheel
            of --version V (default: the installed version) into -o DIR
            (default dist/).

The maintainers' commands are python -m jax_fork's (in a checkout of this
repository).

Exit codes:
  0  success, or nothing to do
  1  internal error (a bug in this tool)
  2  usage error (also --version that is not a release number, a relative
     JAX_INTERPRET_PATCHES_STATE_DIR, a flag the command does not take (apply
     --all), --lock_timeout that is not a finite number >= 0, a --readme that
     is missing, a link, not a regular file, not UTF-8 or without the table's
     markers, and a maintainers' command, which python -m jax_fork runs)
  3  jax not installed, or its version is not served by this release (or not a
     jax release at all, e.g. 1.0a1)
  4  target files locally modified (also a link, FIFO or device in place of
     one), a patch does not apply (conflict; for check: some patch conflicts),
     a file changed since an interrupted run, or by another process while this
     run replaced the files (kept as it is, the other files put back), or
     temporary files of a killed run whose journal is in another state root;
     nothing was changed
  5  environment problem: apply or revert run by another user than the owner of
     site-packages/jax (root too: sudo -u OWNER), a folder it writes in (or one
     above it) that another user can change, a __pycache__ that is a link, a
     --python that another user can change (it is not run), git or the wheel
     package missing, git killed by a signal (e.g. ulimit -f), a target file
     that cannot be replaced (immutable, read-only mount), site-packages or the
     state directory read-only or full, $TMPDIR too small, the lock path not a
     file, a state folder or file that is a link, FIFO or device, or another
     user's or writable by one, a wheel that cannot be downloaded or cached, a
     truncated or corrupt wheel in --wheel_dir, or one whose sha256 is not the
     released wheel's (a corrupt one in the cache, when apply --force or revert
     needs it), wheel -o DIR that cannot take the wheel (a file, read-only,
     immutable, full, a folder at the wheel's name), a --readme that cannot be
     read or rewritten, an environment whose installed packages cannot be read
     (a path longer than PATH_MAX) or a --python that reports no usable
     environment; nothing was changed
  6  another run holds the lock
  7  patch data problem: a patch file corrupted or edited, the manifest
     missing, malformed, edited by hand or out of date, a path outside
     site-packages/jax, or an unusable journal or record; nothing was
     changed
  129, 130, 143
     stopped by SIGHUP, SIGINT (Ctrl-C) or SIGTERM (128 + the signal's
     number) after finishing or undoing the step in progress: jax is
     pristine or fully patched, no partial file is left

A report that cannot be written to stdout (a full disk, /dev/full) does not
undo the command's work (apply may have patched jax): a note goes to stderr
and the exit code is the command's, 5 in place of 0. A reader that goes away
(| head) changes nothing.

Flags may be written with - or _ (--dry-run, --dry_run); -o DIR is
--output_dir=DIR.

Environment variables: JAX_INTERPRET_PATCHES_DIR (same as --patches_dir),
JAX_INTERPRET_PATCHES_STATE_DIR (the state root: one folder per install
with its lock, journal, pristine backup and record; default
<site-packages>/../.jax-interpret-patches),
JAX_INTERPRET_PATCHES_CACHE (wheel cache root).
"""

from __future__ import annotations

import math
import os
import sys
import tempfile
import traceback
from typing import Callable

from absl import app
from absl import flags
from absl import logging

from migration import environment
from migration import errors
from migration import fsutil
from migration import interrupt
from migration import manifest as manifest_lib
from migration import report
from migration import state

COMMANDS = ('status', 'check', 'apply', 'revert', 'wheel')
# The maintainers' commands, python -m jax_fork's since interpret.2: their
# old spellings exit 2 naming the new one, for one release.
MOVED = ('fork', 'refresh', 'carry', 'port', 'drift', 'manifest',
         'export-upstream')

_JSON = flags.DEFINE_bool('json', False, 'Print the report as JSON.')
_PATCHES_DIR = flags.DEFINE_string(
    'patches_dir', None,
    'Patches directory (default: the installed package data, else the '
    "repository's patches/).")
_LOCK_TIMEOUT = flags.DEFINE_float(
    'lock_timeout', 0.0,
    'Seconds to wait for a concurrent run to release the lock.')
_WHEEL_DIR = flags.DEFINE_multi_string(
    'wheel_dir', [],
    'Directories searched for released jax wheels before the cache.')
_PYTHON = flags.DEFINE_string(
    'python', None,
    'The Python executable of the environment to inspect or patch '
    '(default: the running one).')
_DRY_RUN = flags.DEFINE_bool(
    'dry_run', False, 'apply/revert: check and report; change nothing.')
_VERBOSE = flags.DEFINE_bool(
    'verbose', False,
    'apply/revert: also print the status table afterwards (as status does).')
_FORCE = flags.DEFINE_bool(
    'force', False,
    'apply: set locally modified files aside in the state directory '
    '(revert restores them) and patch the released files.')
_VERSION = flags.DEFINE_multi_string(
    'version', [],
    'check/wheel: a jax version (repeatable, or comma-separated for check); '
    'default: the installed one.')
_ALL = flags.DEFINE_bool(
    'all', False, 'check: every jax version the manifest serves.')
_README = flags.DEFINE_string(
    'readme', None,
    'check --all: rewrite the compatibility table between its marker lines '
    'in this Markdown file (this repository\'s: docs/compatibility.md).')
_OUTPUT_DIR = flags.DEFINE_string(
    'output_dir', 'dist',
    'wheel: the directory for the wheel (-o).')
flags.register_validator(
    'lock_timeout', lambda v: math.isfinite(v) and v >= 0,
    'must be a finite number of seconds, 0 or more.')
flags.register_validator(
    'output_dir', bool, 'needs a folder (-o DIR).')

# The commands of python -m migration that take each of its flags; the
# others refuse it (exit 2). --json, --patches_dir and --python: all.
FLAG_COMMANDS = {
    'lock_timeout': ('apply', 'revert'),
    'wheel_dir': ('check', 'apply', 'revert', 'wheel'),
    'dry_run': ('apply', 'revert'),
    'verbose': ('apply', 'revert'),
    'force': ('apply',),
    'version': ('check', 'wheel'),
    'all': ('check',),
    'readme': ('check',),
    'output_dir': ('wheel',),
}

_HELP_ARGS = ('-h', '-?', '--help', '--helpshort', '--helpfull')
_MODULE_PROG = 'python -m migration'


def prog(argv0: str | None = None) -> str:
  """Returns the program the user ran, to name it in help and error texts.

  Args:
    argv0: ``sys.argv[0]`` (the default): ``.../migration/__main__.py`` for
      ``python -m migration`` (``.../jax_fork/__main__.py`` for ``python -m
      jax_fork``), the script's path for the console script.

  Returns:
    ``python -m migration`` (``python -m jax_fork``) or the script's name,
    e.g. ``jax-interpret-patches``.
  """
  argv0 = sys.argv[0] if argv0 is None else argv0
  name = os.path.basename(argv0)
  if name == '__main__.py':
    return 'python -m ' + os.path.basename(os.path.dirname(argv0))
  if not name or name in ('-c', '-m') or name.endswith('.py'):
    return _MODULE_PROG
  return name


def _named(text: str) -> str:
  """Names the console script run where ``text`` says python -m migration."""
  name = prog()
  return text if name.startswith('python -m ') else text.replace(
      _MODULE_PROG, name)


def _usage() -> str:
  usage = __doc__ if prog() == _MODULE_PROG else '\n'.join(
      line for line in __doc__.splitlines()
      if not line.startswith('   or: '))
  return _named(usage + '\nflags:\n'
                + flags.FLAGS.module_help(sys.modules[__name__]) + '\n')


def _normalize(argv: list[str]) -> list[str]:
  """Accepts --dry-run for --dry_run, and -o DIR for --output_dir=DIR."""
  out = [argv[0]]
  args = iter(argv[1:])
  for a in args:
    if a == '--':
      out.append(a)
      out.extend(args)
      break
    if a == '-o':
      out.append('--output_dir=' + next(args, ''))
    elif a.startswith('-o') and not a.startswith('--'):
      out.append('--output_dir=' + a[2:])
    elif a.startswith('--') and '-' in a[2:].split('=', 1)[0]:
      name, sep, value = a[2:].partition('=')
      out.append('--' + name.replace('-', '_') + sep + value)
    else:
      out.append(a)
  return out


def parse_flags(argv: list[str],
                usage: Callable[[], str] | None = None) -> list[str]:
  """Parses flags; exits 0 on --help and 2 on a usage error.

  Args:
    argv: ``sys.argv``.
    usage: returns the --help text; default: this module's (python -m
      jax_fork passes its own).

  Returns:
    The arguments that are not flags, ``argv[0]`` first.
  """
  if any(a in _HELP_ARGS for a in argv[1:]):
    error = _emit((usage or _usage)().rstrip('\n'), sys.stdout)
    sys.exit(_unwritten('--help', error) if error
             else int(errors.ExitCode.OK))
  try:
    remaining = flags.FLAGS(_normalize(argv))
  except SystemExit:
    # absl's own help flags (--helpxml, --help=true) print their help and
    # exit 1, which means a bug here.
    sys.exit(int(errors.ExitCode.OK))
  except flags.Error as e:
    _emit(f'Error (usage, exit code 2): {e}\n'
          f'Run {prog()} --help for usage.', sys.stderr)
    sys.exit(int(errors.ExitCode.USAGE))
  if not flags.FLAGS['verbosity'].present:
    logging.set_verbosity(logging.WARNING)  # -v 0 shows each step.
  return remaining


def done_json(command: str, **fields) -> tuple[int, str]:
  """Returns exit code 0 and the JSON report of a command that succeeded.

  Args:
    command: the command.
    **fields: the report's fields besides ``command``, ``ok`` and
      ``exit_code``.

  Returns:
    ``(0, the JSON text)``.
  """
  return 0, report.to_json(
      {'command': command, 'ok': True, 'exit_code': 0, **fields})


def _status(patches_dir: str) -> tuple[int, str]:
  fsutil.sweep_scratch()  # Of killed runs.
  manifest = manifest_lib.load(patches_dir)
  env = environment.detect(_PYTHON.value)
  status = state.classify(env, manifest)
  from migration import transaction  # pylint: disable=g-import-not-at-top
  interrupted, problem = transaction.inspect_state(status)
  if _JSON.value:
    data = report.status_dict(status)
    data.update(command='status', ok=True, exit_code=0,
                interrupted=interrupted, state_problem=problem)
    return 0, report.to_json(data)
  text = report.status_text(status)
  if interrupted:
    text += ('\n\nAn interrupted run was found; the next apply or revert '
             'completes or undoes it first.')
  if problem:
    text += f'\n\nState directory problem: {problem}'
  return 0, text


def parse_versions(value: list[str]) -> list[str]:
  """The --version values; raises UsageError for one that is no version."""
  from migration import wheels  # pylint: disable=g-import-not-at-top
  return [wheels.check_version_number(v)
          for item in value for v in item.split(',') if v]


def _installed_version() -> str:
  env = environment.detect(_PYTHON.value)
  if not env.jax_installed:
    raise errors.UnsupportedError(
        f'jax is not installed in this environment (Python '
        f'{env.python_version}); pass --version.')
  return env.jax_version


def _check(patches_dir: str) -> tuple[int, str]:
  # The modules of check, wheel, apply and revert are imported when run, so
  # that status imports only what it uses.
  # pylint: disable=g-import-not-at-top
  from migration import check
  from migration import compat
  # pylint: enable=g-import-not-at-top
  manifest = manifest_lib.load(patches_dir)
  versions = parse_versions(_VERSION.value)
  if _ALL.value and versions:
    raise errors.UsageError('Pass --version or --all, not both.')
  if _README.value and not _ALL.value:
    raise errors.UsageError('--readme needs --all.')
  if _README.value:
    compat.read_readme(_README.value)  # Refused before the work.
  if _ALL.value:
    versions = manifest.served_versions()
  elif not versions:
    versions = [_installed_version()]
  wheel_dirs = tuple(_WHEEL_DIR.value)
  results = check.check_versions(manifest, versions, wheel_dirs)
  features = compat.features(manifest)
  table = compat.rows(manifest, results, features, wheel_dirs)
  data = report.check_dict(results, table, features)
  code = data['exit_code']
  if _README.value:
    before = compat.read_readme(_README.value)  # As it is now.
    after = compat.replace_block(before, compat.markdown(features, table),
                                 _README.value)
    if after != before:
      compat.write_readme(_README.value, after)
    data['readme'] = {'path': _README.value, 'changed': after != before}
  if _JSON.value:
    return code, report.to_json(data)
  text = report.check_text(
      results, report.compat_text(features, table),
      only_conflicts=_ALL.value)
  if _README.value:
    text += (f'\nRewrote the compatibility table in {_README.value}.'
             if data['readme']['changed'] else
             f'\nThe compatibility table in {_README.value} is up to date.')
  return code, text


def _wheel(patches_dir: str) -> tuple[int, str]:
  from migration import wheelbuild  # pylint: disable=g-import-not-at-top
  manifest = manifest_lib.load(patches_dir)
  versions = parse_versions(_VERSION.value)
  if len(versions) > 1:
    raise errors.UsageError('wheel builds one version at a time.')
  version = versions[0] if versions else _installed_version()
  path = wheelbuild.build(manifest, version, _OUTPUT_DIR.value,
                          tuple(_WHEEL_DIR.value))
  if _JSON.value:
    return done_json('wheel', wheel=os.path.abspath(path), version=version,
                      release=manifest.release)
  return 0, (f'Built {path}\nInstall it beside the matching jaxlib: '
             f'pip install {path} jaxlib=={version}')


def _apply_or_revert(command: str, patches_dir: str) -> tuple[int, str]:
  from migration import transaction  # pylint: disable=g-import-not-at-top
  manifest = manifest_lib.load(patches_dir)
  result = transaction.run(command, manifest, _LOCK_TIMEOUT.value,
                           python=_PYTHON.value, dry_run=_DRY_RUN.value,
                           force=_FORCE.value,
                           wheel_dirs=tuple(_WHEEL_DIR.value))
  if _JSON.value:
    return 0, report.to_json(report.result_dict(result))
  return 0, report.result_text(result, table=_VERBOSE.value)


def _emit(text: str, stream) -> OSError | None:
  """Prints `text`; a reader that went away (`| head`) is not an error.

  The command has already done its work, so its exit code stands. As the
  Python documentation recommends for SIGPIPE, the rest of the output goes to
  os.devnull, so that the interpreter's final flush does not fail either;
  so it does after any other write error (a full disk, /dev/full), which is
  returned, never raised. A stream that was closed when Python started
  (None) gets nothing; text that the stream's encoding cannot take (a path
  that is not UTF-8) is written with backslash escapes.

  Returns:
    The error that kept ``text`` from being written; None if it was
    written or its reader went away.
  """
  if stream is None:  # Closed when Python started: print() would use stdout.
    return None
  try:
    try:
      print(text, file=stream, flush=True)
    except UnicodeEncodeError:  # E.g. a path that is not UTF-8.
      print(text.encode('ascii', 'backslashreplace').decode('ascii'),
            file=stream, flush=True)
  except OSError as e:
    try:
      null = os.open(os.devnull, os.O_WRONLY)
      os.dup2(null, stream.fileno())
      os.close(null)
    except (OSError, ValueError):  # No file descriptor (a StringIO).
      pass
    return None if isinstance(e, BrokenPipeError) else e
  return None


def _unwritten(command: str, error: OSError, code: int = 0) -> int:
  """Says on stderr that the report of ``command`` could not be written.

  Args:
    command: the command (or ``--help``).
    error: why stdout did not take it (``_emit``).
    code: the command's exit code.

  Returns:
    The exit code: ``code``, 5 (environment) in place of 0.
  """
  code = code or errors.ExitCode.ENVIRONMENT
  _emit(f'Error (environment, exit code {int(code)}): cannot write the '
        f'report of {prog()} {command} to stdout ({error}); the command has '
        'finished, only its report is lost.', sys.stderr)
  return int(code)


def execute(command: str, run_command: Callable[[], tuple[int, str]]
            ) -> int:
  """Runs one command and prints its report, or its error.

  python -m jax_fork runs its commands with this too.

  Args:
    command: the command's name, for the JSON error report.
    run_command: runs the command; returns its exit code and report.

  Returns:
    The process exit code: the command's; for an error, its documented exit
    code (``errors.ExitCode``), 1 for an exception that is not a
    ``MigrationError`` (a bug), whose traceback goes to stderr.
  """
  try:
    code, out = run_command()
    interrupt.raise_pending()  # One that came during a finalizer.
    interrupt.hold()  # Done: a signal from now on changes nothing.
    failure = _emit(out, sys.stdout)
    return _unwritten(command, failure, code) if failure else code
  except errors.MigrationError as e:
    error, code = e, e.exit_code
  except interrupt.Interrupted as e:
    error, code = e, e.exit_code
  except Exception as e:  # pylint: disable=broad-except
    if sys.stderr is not None:
      traceback.print_exc()
    error, code = e, errors.ExitCode.INTERNAL
  interrupt.hold()
  # The JSON report goes to stdout; where stdout does not take it (a full
  # disk), the error goes to stderr as without --json.
  if not _JSON.value or _emit(
      report.to_json(report.error_dict(command, error, code)), sys.stdout):
    _emit(_named(report.error_text(error, code)), sys.stderr)
  return int(code)


def _run(args: list[str]) -> tuple[int, str]:
  """Runs the user command ``args[0]``; returns its exit code and report."""
  command = args[0] if args else ''
  if command in MOVED:
    raise errors.UsageError(moved_message(command))
  if len(args) != 1 or command not in COMMANDS:
    raise errors.UsageError(
        f'Expected one command out of {", ".join(COMMANDS)}; got '
        f'{" ".join(args) or "none"}. Run {prog()} --help.')
  for name, commands in FLAG_COMMANDS.items():
    if flags.FLAGS[name].present and command not in commands:
      which = ' and '.join((', '.join(commands[:-1]), commands[-1])
                           if len(commands) > 1 else commands)
      raise errors.UsageError(
          f'--{name} is only for {which}; {prog()} {command} does not take '
          f'it. Run {prog()} --help.')
  patches_dir = manifest_lib.locate_patches_dir(_PATCHES_DIR.value)
  if command == 'status':
    return _status(patches_dir)
  if command == 'check':
    return _check(patches_dir)
  if command == 'wheel':
    return _wheel(patches_dir)
  return _apply_or_revert(command, patches_dir)


def main(argv: list[str]) -> int:
  """Runs one command; returns the process exit code."""
  args = argv[1:]
  return execute(args[0] if args else '', lambda: _run(args))


def moved_message(command: str) -> str:
  """Says where the maintainers' command ``command`` (in ``MOVED``) went."""
  return (f'{prog()} {command} is no longer a command: the maintainers\' '
          f'commands moved to python -m jax_fork. Run python -m jax_fork '
          f'{command} (the same arguments and flags) in a checkout of this '
          'repository; see jax_fork/README.md.')


def run() -> None:
  """Entry point of ``python -m migration``."""
  interrupt.install()  # Again, for the console script.
  for fd in (0, 1, 2):  # Closed: /dev/null, so no file the tool opens is one.
    try:
      os.fstat(fd)
    except OSError:
      os.open(os.devnull, os.O_RDWR)  # The lowest free number: fd.
  # Before the flags are parsed: the maintainers' flags (--onto, ...) are
  # python -m jax_fork's.
  command = next((a for a in sys.argv[1:] if a in MOVED), None)
  if command:
    _emit(f'Error (usage, exit code 2): {moved_message(command)}',
          sys.stderr)
    sys.exit(int(errors.ExitCode.USAGE))
  with interrupt.exit_on_signal():
    # tempfile's first call writes and removes a probe file in $TMPDIR: not
    # cut short by a signal.
    with interrupt.deferred():
      tempfile.gettempdir()
    app.run(main, flags_parser=parse_flags)
