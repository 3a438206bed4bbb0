"""Patch jax's Pallas TPU interpreter in place, reversibly.

Usage: python -m migration COMMAND [--json] [flags]

Run with the Python whose environment holds the jax to patch. jax is never
imported; its version is read from the installed metadata.

Commands:
  status    Show the jax version, the serving patch series and the state of
            every target file (pristine, patched k/n, locally modified).
  apply     Apply the series (or its remaining patches), all-or-nothing.
            Already patched: nothing to do, exit code 0.
  revert    Restore the released files byte for byte (the applied patches
            are reverse-applied and the result is checked against the
            pristine sha256). Already pristine: nothing to do, exit code 0.
  manifest  Maintainers: regenerate patches/manifest.json from the series
            files and the released jax wheels (downloaded with pip into
            ~/.cache/jax-interpret-patches/wheels).

Exit codes:
  0  success, or nothing to do
  1  internal error (a bug in this tool)
  2  usage error
  3  jax not installed, or its version is not served by this release
  4  target files locally modified, or a patch does not apply (conflict);
     nothing was changed
  5  environment problem: git missing, site-packages not writable;
     nothing was changed
  6  another run holds the lock
  7  patch data problem: a patch file corrupted or edited, manifest missing
     or out of date; nothing was changed

Environment variables: JAX_INTERPRET_PATCHES_DIR (same as --patches_dir),
JAX_INTERPRET_PATCHES_STATE_DIR (lock, journal and pristine backup; default
<site-packages>/../.jax-interpret-patches), JAX_INTERPRET_PATCHES_CACHE.
"""

from __future__ import annotations

import os
import sys
import traceback

from absl import app
from absl import flags
from absl import logging

from migration import environment
from migration import errors
from migration import manifest as manifest_lib
from migration import report
from migration import state
from migration import transaction

COMMANDS = ('status', 'apply', 'revert', 'manifest')

_JSON = flags.DEFINE_bool('json', False, 'Print the report as JSON.')
_PATCHES_DIR = flags.DEFINE_string(
    'patches_dir', None,
    'Patches directory (default: the installed package data, else the '
    "repository's patches/).")
_LOCK_TIMEOUT = flags.DEFINE_float(
    'lock_timeout', 0.0,
    'Seconds to wait for a concurrent run to release the lock.')
_SERVE = flags.DEFINE_multi_string(
    'serve', [],
    'manifest: SERIES=VERSION[,VERSION...], the jax versions a series '
    'serves (default: as in the existing manifest).')
_RELEASE = flags.DEFINE_integer(
    'release', None,
    'manifest: the project release number N (wheel label +interpret.N); '
    'default: keep the existing one, 1 for a new manifest.')
_WHEEL_DIR = flags.DEFINE_multi_string(
    'wheel_dir', [],
    'manifest: directories searched for released jax wheels before the '
    'cache.')

_HELP_ARGS = ('-h', '-?', '--help', '--helpshort', '--helpfull')


def _usage() -> str:
  return (__doc__ + '\nflags:\n'
          + flags.FLAGS.module_help(sys.modules[__name__]) + '\n')


def parse_flags(argv: list[str]) -> list[str]:
  """Parses flags; exits 0 on --help and 2 on a usage error."""
  if any(a in _HELP_ARGS for a in argv[1:]):
    sys.stdout.write(_usage())
    sys.exit(int(errors.ExitCode.OK))
  try:
    remaining = flags.FLAGS(argv)
  except flags.Error as e:
    sys.stderr.write(f'Error (usage, exit code 2): {e}\n'
                     'Run python -m migration --help for usage.\n')
    sys.exit(int(errors.ExitCode.USAGE))
  if not flags.FLAGS['verbosity'].present:
    logging.set_verbosity(logging.WARNING)  # -v 0 shows each step.
  return remaining


def _parse_serve(values: list[str]) -> dict[str, list[str]]:
  out = {}
  for v in values:
    name, sep, versions = v.partition('=')
    if not sep or not versions:
      raise errors.UsageError(
          f'--serve={v}: expected SERIES=VERSION[,VERSION...].')
    out[name] = [x for x in versions.split(',') if x]
  return out


def _status(patches_dir: str) -> tuple[int, str]:
  manifest = manifest_lib.load(patches_dir)
  env = environment.detect()
  status = state.classify(env, manifest)
  interrupted = bool(env.site_packages) and os.path.exists(
      os.path.join(transaction.state_dir(env), transaction.JOURNAL))
  if _JSON.value:
    data = report.status_dict(status)
    data.update(command='status', ok=True, exit_code=0,
                interrupted=interrupted)
    return 0, report.to_json(data)
  text = report.status_text(status)
  if interrupted:
    text += ('\n\nAn interrupted run was found; the next apply or revert '
             'completes or undoes it first.')
  return 0, text


def _apply_or_revert(command: str, patches_dir: str) -> tuple[int, str]:
  manifest = manifest_lib.load(patches_dir)
  result = transaction.run(command, manifest, _LOCK_TIMEOUT.value)
  if _JSON.value:
    return 0, report.to_json(report.result_dict(result))
  return 0, report.result_text(result)


def _manifest(patches_dir: str) -> tuple[int, str]:
  data = manifest_lib.generate(patches_dir, _parse_serve(_SERVE.value),
                               _RELEASE.value, tuple(_WHEEL_DIR.value))
  if _JSON.value:
    return 0, report.to_json({'command': 'manifest', 'ok': True,
                              'exit_code': 0, 'manifest': data})
  lines = [f'Wrote {patches_dir}/{manifest_lib.MANIFEST} '
           f'(release {data["release"]}).']
  for name, s in data['series'].items():
    lines.append(f'  {name}: {len(s["patches"])} patches, serves jax '
                 + ', '.join(s['versions']))
  return 0, '\n'.join(lines)


def _emit(text: str, stream) -> None:
  """Prints `text`; a reader that went away (`| head`) is not an error.

  The command has already done its work, so its exit code stands. As the
  Python documentation recommends for SIGPIPE, the rest of the output goes to
  os.devnull, so that the interpreter's final flush does not fail either.
  """
  try:
    print(text, file=stream, flush=True)
  except BrokenPipeError:
    os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())


def main(argv: list[str]) -> int:
  """Runs one command; returns the process exit code."""
  args = argv[1:]
  command = args[0] if args else ''
  try:
    if len(args) != 1 or command not in COMMANDS:
      raise errors.UsageError(
          f'Expected one command out of {", ".join(COMMANDS)}; got '
          f'{" ".join(args) or "none"}. Run python -m migration --help.')
    patches_dir = manifest_lib.locate_patches_dir(_PATCHES_DIR.value)
    if command == 'status':
      code, out = _status(patches_dir)
    elif command == 'manifest':
      code, out = _manifest(patches_dir)
    else:
      code, out = _apply_or_revert(command, patches_dir)
    _emit(out, sys.stdout)
    return code
  except errors.MigrationError as e:
    error, code = e, e.exit_code
  except Exception as e:  # pylint: disable=broad-except
    traceback.print_exc()
    error, code = e, errors.ExitCode.INTERNAL
  if _JSON.value:
    _emit(report.to_json(report.error_dict(command, error, code)), sys.stdout)
  else:
    _emit(report.error_text(error, code), sys.stderr)
  return int(code)


def run() -> None:
  """Entry point of ``python -m migration``."""
  app.run(main, flags_parser=parse_flags)
