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
            (--all: details of conflicts only). --readme=README.md (with
            --all) rewrites the README's table.
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
  fork      Maintainers: make jax_fork/ a git repository of the released
            interpreter package with one commit per patch.
  refresh   Maintainers: rewrite the series from jax_fork/'s commits and
            regenerate the manifest.
            fork --all: one branch per series (jax-0.7.2 ... jax-0.12.0),
            each on its release's files (tag upstream/V); refresh --all:
            rewrite every series from its branch, all or nothing.
  carry     Maintainers: carry COMMIT or A..B (a fix, normally a fixup!
            commit on the newest branch) to every other series' branch
            (--onto=B,...): git cherry-pick -x, then rebase --autosquash;
            stops at the first conflict, naming branch, file and hunk.
  drift     Maintainers: per series and patch, the lines it adds or removes
            that the newest series' patch does not (context ignored); exit
            7 on drift not recorded in patches/drift.json (--update records
            it; --series=S prints the lines).
  port      Maintainers: serve --version V (a new jax release; its wheel
            may be in --wheel_dir): the nearest series exactly, else
            rebased with a 3-way merge into patches/jax-V/; regenerates the
            manifest and README.md's table; exit 4 and nothing written on
            a conflict.
  manifest  Maintainers: regenerate patches/manifest.json from the series
            files and the released jax wheels (downloaded with pip into
            ~/.cache/jax-interpret-patches/wheels).
  export-upstream
            Maintainers: a stack of single-commit pull requests on top of
            the jax checkout --jax_repo (left untouched), one per patch of
            the series, in order: the patch's interpreter change, its test
            methods added to upstream's tpu_pallas_interpret_test.py and
            tpu_pallas_interpret_distributed_test.py, and its changelog
            entry; the patch's message without the DEP-3 header, authored by
            your git identity. Written with git format-patch into -o DIR
            (default dist/upstream/) for `git am --keep-non-patch`, each
            with a pull request description (.md) beside it. BUILD deps
            follow the imports each commit adds. Measuring is off by
            default: with --test_python, upstream's TPU interpreter tests
            run before and after each commit (its other interpreter tests
            before and after the stack) and the descriptions give the
            counts. Nothing is submitted.

Exit codes:
  0  success, or nothing to do
  1  internal error (a bug in this tool)
  2  usage error (also --version that is not a release number)
  3  jax not installed, or its version is not served by this release (or
     not a jax release at all)
  4  target files locally modified, a patch does not apply (conflict; for
     check: some patch conflicts; for carry and port: a hunk does not
     merge), jax_fork/ would be overwritten, or a file changed since an
     interrupted run; nothing was changed (carry keeps the fix on the
     branches before the conflicting one)
  5  environment problem: git or the wheel package missing, a target file
     that cannot be replaced (immutable, read-only mount), site-packages or
     the state directory read-only or full, the lock path not a file, a
     wheel that cannot be downloaded or cached, a --python that reports no
     usable environment; nothing was changed
  6  another run holds the lock
  7  patch data problem: a patch file corrupted or edited, the manifest
     missing, malformed, edited by hand or out of date, a path outside
     site-packages/jax, an unusable journal, or (drift) new drift between
     series; nothing was changed

Flags may be written with - or _ (--dry-run, --dry_run); -o DIR is
--output_dir=DIR.

Environment variables: JAX_INTERPRET_PATCHES_DIR (same as --patches_dir),
JAX_INTERPRET_PATCHES_STATE_DIR (lock, journal, pristine backup and record;
default <site-packages>/../.jax-interpret-patches),
JAX_INTERPRET_PATCHES_CACHE (wheel cache root).
"""

from __future__ import annotations

import os
import sys
import traceback

from absl import app
from absl import flags
from absl import logging

from migration import carry
from migration import check
from migration import compat
from migration import environment
from migration import drift
from migration import errors
from migration import fork
from migration import fsutil
from migration import manifest as manifest_lib
from migration import port
from migration import report
from migration import state
from migration import transaction
from migration import upstream
from migration import wheelbuild
from migration import wheels

COMMANDS = ('status', 'check', 'apply', 'revert', 'wheel', 'fork', 'refresh',
            'carry', 'port', 'drift', 'manifest', 'export-upstream')

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
    'check/wheel/fork/port: a jax version (repeatable, or comma-separated '
    'for check); default: the installed one (fork: the newest served one).')
_ALL = flags.DEFINE_bool(
    'all', False, 'check: every jax version the manifest serves; fork, '
    'refresh: every series, one branch each.')
_README = flags.DEFINE_string(
    'readme', None,
    'check --all: rewrite the compatibility table between its marker lines '
    'in this Markdown file (README.md); port: that file (default: '
    'README.md beside patches/).')
_OUTPUT_DIR = flags.DEFINE_string(
    'output_dir', 'dist',
    'wheel: the directory for the wheel; export-upstream: for the patches '
    '(default there: dist/upstream) (-o).')
_JAX_REPO = flags.DEFINE_string(
    'jax_repo', None, 'export-upstream: the upstream jax git checkout.')
_SERIES = flags.DEFINE_string(
    'series', None,
    'export-upstream: the series to export (default: the one that applies '
    'exactly to the checkout); drift: the series whose lines to print.')
_TEST_PYTHON = flags.DEFINE_string(
    'test_python', None,
    'export-upstream: measure the tests the descriptions claim (default: '
    'not measured) with this Python, which has jaxlib of the checkout\'s '
    'version and pytest; upstream\'s TPU interpreter tests (and ruff and '
    'pyrefly, if installed beside it) run before and after each commit, its '
    'other interpreter tests before and after the stack (tens of minutes), '
    'and the pull request descriptions give the commands and counts.')
_FORK_DIR = flags.DEFINE_string(
    'fork_dir', None,
    'fork/refresh: the fork folder (default: jax_fork/ beside patches/).')

_ONTO = flags.DEFINE_list(
    'onto', [],
    'carry: the branches to carry the commits to (default: every other '
    "series' branch).")

_UPDATE = flags.DEFINE_bool(
    'update', False,
    'drift: record the current drift as known in patches/drift.json.')

_HELP_ARGS = ('-h', '-?', '--help', '--helpshort', '--helpfull')
_MODULE_PROG = 'python -m migration'


def prog(argv0: str | None = None) -> str:
  """Returns the program the user ran, to name it in help and error texts.

  Args:
    argv0: ``sys.argv[0]`` (the default): ``.../migration/__main__.py`` for
      ``python -m migration``, the script's path for the console script.

  Returns:
    ``python -m migration`` or the script's name, e.g.
    ``jax-interpret-patches``.
  """
  argv0 = sys.argv[0] if argv0 is None else argv0
  name = os.path.basename(argv0)
  if not name or name in ('__main__.py', '-c', '-m') or name.endswith('.py'):
    return _MODULE_PROG
  return name


def _named(text: str) -> str:
  """Names the program the user ran where ``text`` says python -m migration."""
  return text.replace(_MODULE_PROG, prog())


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


def parse_flags(argv: list[str]) -> list[str]:
  """Parses flags; exits 0 on --help and 2 on a usage error."""
  if any(a in _HELP_ARGS for a in argv[1:]):
    sys.stdout.write(_usage())
    sys.exit(int(errors.ExitCode.OK))
  try:
    remaining = flags.FLAGS(_normalize(argv))
  except flags.Error as e:
    sys.stderr.write(f'Error (usage, exit code 2): {e}\n'
                     f'Run {prog()} --help for usage.\n')
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


def _done_json(command: str, **fields) -> tuple[int, str]:
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


def _versions(value: list[str]) -> list[str]:
  """The --version values; raises UsageError for one that is no version."""
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
  manifest = manifest_lib.load(patches_dir)
  versions = _versions(_VERSION.value)
  if _ALL.value and versions:
    raise errors.UsageError('Pass --version or --all, not both.')
  if _ALL.value:
    versions = manifest.served_versions()
  elif not versions:
    versions = [_installed_version()]
  if _README.value and not _ALL.value:
    raise errors.UsageError('--readme needs --all.')
  wheel_dirs = tuple(_WHEEL_DIR.value)
  results = check.check_versions(manifest, versions, wheel_dirs)
  features = compat.features(manifest)
  table = compat.rows(manifest, results, features, wheel_dirs)
  data = report.check_dict(results, table, features)
  code = data['exit_code']
  if _README.value:
    with open(_README.value, encoding='utf-8') as f:
      before = f.read()
    after = compat.replace_block(before, compat.markdown(features, table),
                                 _README.value)
    if after != before:
      with open(_README.value, 'w', encoding='utf-8') as f:
        f.write(after)
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
  manifest = manifest_lib.load(patches_dir)
  versions = _versions(_VERSION.value)
  if len(versions) > 1:
    raise errors.UsageError('wheel builds one version at a time.')
  version = versions[0] if versions else _installed_version()
  path = wheelbuild.build(manifest, version, _OUTPUT_DIR.value,
                          tuple(_WHEEL_DIR.value))
  if _JSON.value:
    return _done_json('wheel', wheel=os.path.abspath(path), version=version,
                      release=manifest.release)
  return 0, (f'Built {path}\nInstall it beside the matching jaxlib: '
             f'pip install {path} jaxlib=={version}')


def _fork_dir(patches_dir: str) -> str:
  return os.path.abspath(_FORK_DIR.value or os.path.join(
      os.path.dirname(patches_dir), 'jax_fork'))


def _fork(command: str, patches_dir: str) -> tuple[int, str]:
  manifest = manifest_lib.load(patches_dir)
  fork_dir = _fork_dir(patches_dir)
  if command == 'fork':
    versions = _versions(_VERSION.value)
    if len(versions) > 1 or (versions and _ALL.value):
      raise errors.UsageError('fork takes one version, or --all.')
    if _ALL.value:
      return _fork_all(command, manifest, fork_dir)
    info = fork.materialize(manifest, fork_dir,
                            versions[0] if versions else None,
                            tuple(_WHEEL_DIR.value))
    text = (f'Made {fork_dir}: jax {info.version} (tag upstream/'
            f'{info.version}) plus {len(info.patches)} commit(s) of '
            f'{info.series} on branch {info.series}. Edit, commit, then run '
            f'{prog()} refresh. Run git inside '
            f'{os.path.join(fork_dir, fork.PACKAGE_DIR)}.')
  elif _ALL.value:
    return _fork_all(command, manifest, fork_dir)
  else:
    info = fork.refresh(manifest, fork_dir, tuple(_WHEEL_DIR.value))
    text = (f'Wrote {len(info.patches)} patch(es) to '
            f'{os.path.join(patches_dir, info.series)} and regenerated '
            f'{manifest_lib.MANIFEST}:\n'
            + '\n'.join(f'  {n}' for n in info.patches))
  if _JSON.value:
    return _done_json(command, fork_dir=fork_dir, version=info.version,
                      series=info.series, patches=list(info.patches))
  return 0, text


def _fork_all(command: str, manifest: manifest_lib.Manifest,
              fork_dir: str) -> tuple[int, str]:
  wheel_dirs = tuple(_WHEEL_DIR.value)
  if command == 'fork':
    infos = fork.materialize_all(manifest, fork_dir, wheel_dirs)
    text = (f'Made {fork_dir} with one branch per series (the newest, '
            f'{infos[-1].series}, checked out):\n'
            + '\n'.join(f'  {i.series}: upstream/{i.version} + '
                        f'{len(i.patches)} commit(s)' for i in infos)
            + '\nFix on the newest branch, carry the fix with python -m '
            'migration carry, then run python -m migration refresh --all. '
            f'Run git inside {os.path.join(fork_dir, fork.PACKAGE_DIR)}.')
  else:
    infos = fork.refresh_all(manifest, fork_dir, wheel_dirs)
    text = (f'Wrote {len(infos)} series to {manifest.patches_dir} and '
            f'regenerated {manifest_lib.MANIFEST}:\n'
            + '\n'.join(f'  {i.series}: {len(i.patches)} patch(es)'
                        for i in infos))
  if _JSON.value:
    return _done_json(
        command, fork_dir=fork_dir,
        branches=[{'series': i.series, 'version': i.version,
                   'patches': list(i.patches)} for i in infos])
  return 0, text


def _carry(patches_dir: str, revs: list[str]) -> tuple[int, str]:
  if not revs:
    raise errors.UsageError(
        'carry needs the commits to carry: python -m migration carry '
        'COMMIT|A..B [...] [--onto=BRANCH,...].')
  manifest = manifest_lib.load(patches_dir)
  fork_dir = _fork_dir(patches_dir)
  onto = [] if _ONTO.value == ['all'] else list(_ONTO.value)
  result = carry.carry(manifest, fork_dir, revs, onto or None)
  if _JSON.value:
    return _done_json('carry', commits=list(result.commits),
                      source=result.source, branches=list(result.branches))
  return 0, (f'Carried {len(result.commits)} commit(s) '
             f'({"; ".join(result.subjects)}) from {result.source} to '
             f'{", ".join(result.branches) or "no other branch"}. Next: '
             'python -m migration refresh --all.')


def _port(patches_dir: str) -> tuple[int, str]:
  versions = _versions(_VERSION.value)
  if len(versions) != 1:
    raise errors.UsageError('port needs one --version=V.')
  manifest = manifest_lib.load(patches_dir)
  result = port.port(manifest, versions[0], tuple(_WHEEL_DIR.value),
                     _README.value)
  if _JSON.value:
    return _done_json(
        'port', version=result.version, nearest=result.nearest,
        source_series=result.source_series, series=result.series,
        new_series=result.new_series, fits=dict(result.fits),
        readme=result.readme, python=result.python, todo=list(result.todo))
  how = (f'wrote the new series {result.series} (rebased with a 3-way '
         'merge)' if result.new_series else
         f'added it to {result.series} (it applies exactly)')
  lines = [f'jax {result.version}: ported {result.source_series} (served '
           f'release {result.nearest}); {how}.']
  lines += [f'  {n}: {fit}' for n, fit in result.fits]
  lines.append(f'Regenerated {manifest_lib.MANIFEST}'
               + (f' and the table in {result.readme}.' if result.readme
                  else '.'))
  lines.append('A maintainer must still:')
  lines += [f'  - {t}' for t in result.todo]
  return 0, '\n'.join(lines)


def _drift(patches_dir: str) -> tuple[int, str]:
  manifest = manifest_lib.load(patches_dir)
  drifts = drift.compare(manifest)
  if _SERIES.value and _SERIES.value not in manifest.series:
    raise errors.UsageError(f'No series {_SERIES.value}.')
  if _UPDATE.value:
    path = drift.write_baseline(manifest, drifts)
  baseline = drift.load_baseline(manifest)
  new = [d for d in drifts if drift.status(d, baseline) == 'new']
  code = int(errors.ExitCode.PATCH_DATA) if new else 0
  if _JSON.value:
    return code, report.to_json({
        'command': 'drift', 'ok': not new, 'exit_code': code,
        'newest': drift.newest_series(manifest).name,
        'drift': [{'series': d.series, 'subject': d.subject,
                   'status': drift.status(d, baseline),
                   'only_here': [s + t for s, t in d.only_here],
                   'only_newest': [s + t for s, t in d.only_newest],
                   'absent': d.absent} for d in drifts]})
  text = drift.table_text(manifest, drifts, baseline)
  if _SERIES.value:
    text += '\n\n' + drift.details_text(drifts, _SERIES.value)
  if _UPDATE.value:
    text += f'\n\nRecorded the drift above as known in {path}.'
  elif new:
    number = {p.subject: i for i, p in enumerate(
        drift.newest_series(manifest).patches, 1)}
    by_series: dict[str, list[str]] = {}
    for d in new:
      by_series.setdefault(d.series, []).append(
          f'#{number[d.subject]}' if d.subject in number else d.subject)
    text += ('\n\nNew drift (exit code 7) in '
             + '; '.join(f'{s} {", ".join(n)}' for s, n in by_series.items())
             + '.\nCarry the change to every series (python -m migration '
             'carry), or, if the difference is intended, record it with '
             'python -m migration drift --update (see jax_fork/README.md); '
             'python -m migration drift --series=SERIES shows the lines.')
  else:
    text += f'\n\nNo new drift ({drift.BASELINE} records the known drift).'
  return code, text


def _export_upstream(patches_dir: str) -> tuple[int, str]:
  if not _JAX_REPO.value:
    raise errors.UsageError('export-upstream needs --jax_repo PATH.')
  tests_dir = os.path.join(os.path.dirname(patches_dir), 'tests', 'pallas')
  if not os.path.isdir(tests_dir):
    raise errors.UsageError(
        f'export-upstream runs from a checkout of this repository; '
        f'{tests_dir} is missing.')
  output_dir = (_OUTPUT_DIR.value if flags.FLAGS['output_dir'].present
                else os.path.join('dist', 'upstream'))
  written = upstream.export(os.path.abspath(_JAX_REPO.value), output_dir,
                            tests_dir, manifest_lib.load(patches_dir),
                            _SERIES.value, _TEST_PYTHON.value)
  if _JSON.value:
    return _done_json('export-upstream', patches=written)
  return 0, ('Wrote one commit per patch, each with its pull request '
             'description (.md) beside it; apply them in order in the jax '
             'checkout with git am --keep-non-patch:\n'
             + '\n'.join(f'  {p}' for p in written))


def _apply_or_revert(command: str, patches_dir: str) -> tuple[int, str]:
  manifest = manifest_lib.load(patches_dir)
  result = transaction.run(command, manifest, _LOCK_TIMEOUT.value,
                           python=_PYTHON.value, dry_run=_DRY_RUN.value,
                           force=_FORCE.value,
                           wheel_dirs=tuple(_WHEEL_DIR.value))
  if _JSON.value:
    return 0, report.to_json(report.result_dict(result))
  return 0, report.result_text(result, table=_VERBOSE.value)


def _manifest(patches_dir: str) -> tuple[int, str]:
  data = manifest_lib.generate(patches_dir, _parse_serve(_SERVE.value),
                               _RELEASE.value, tuple(_WHEEL_DIR.value))
  if _JSON.value:
    return _done_json('manifest', manifest=data)
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
    if (len(args) != 1 and command != 'carry') or command not in COMMANDS:
      raise errors.UsageError(
          f'Expected one command out of {", ".join(COMMANDS)}; got '
          f'{" ".join(args) or "none"}. Run {prog()} --help.')
    patches_dir = manifest_lib.locate_patches_dir(_PATCHES_DIR.value)
    if command == 'status':
      code, out = _status(patches_dir)
    elif command == 'check':
      code, out = _check(patches_dir)
    elif command == 'wheel':
      code, out = _wheel(patches_dir)
    elif command in ('fork', 'refresh'):
      code, out = _fork(command, patches_dir)
    elif command == 'drift':
      code, out = _drift(patches_dir)
    elif command == 'port':
      code, out = _port(patches_dir)
    elif command == 'carry':
      code, out = _carry(patches_dir, args[1:])
    elif command == 'manifest':
      code, out = _manifest(patches_dir)
    elif command == 'export-upstream':
      code, out = _export_upstream(patches_dir)
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
    _emit(_named(report.error_text(error, code)), sys.stderr)
  return int(code)


def run() -> None:
  """Entry point of ``python -m migration``."""
  app.run(main, flags_parser=parse_flags)
