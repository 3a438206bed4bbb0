"""The maintainers' workbench: the fork of jax's interpreter and the series.

Usage: python -m jax_fork COMMAND [--json] [flags]

Run it in a checkout of this repository; jax_fork/README.md describes the
workflow, with a worked example. Users patch their jax with python -m
migration (status, check, apply, revert, wheel), which never imports this
package.

Commands:
  fork      Make jax_fork/ a git repository of the released interpreter
            package with one commit per patch. --all: one branch per series
            (jax-0.7.2 ... jax-0.12.0), each on its release's files (tag
            upstream/V).
  refresh   Rewrite the series from jax_fork/'s commits and regenerate the
            manifest. --all: rewrite every series from its branch, all or
            nothing.
  carry     Carry COMMIT or A..B (a fix, normally a fixup! commit on the
            newest branch) to every other series' branch (--onto=B,...): git
            cherry-pick -x, then rebase --autosquash; stops at the first
            conflict, naming branch, file and hunk.
  drift     Per series and patch, the lines it adds or removes that the
            newest series' patch does not (context ignored); exit 7 on drift
            not recorded in patches/drift.json (--update records it;
            --series=S prints the lines).
  port      Serve --version V (a new jax release; its wheel may be in
            --wheel_dir): the nearest series exactly, else rebased with a
            3-way merge into patches/jax-V/; regenerates the manifest and
            the table in docs/compatibility.md; exit 4 and nothing written
            on a conflict.
  manifest  Regenerate patches/manifest.json from the series files and the
            released jax wheels (downloaded with pip into
            ~/.cache/jax-interpret-patches/wheels).
  export-upstream
            A stack of single-commit pull requests on top of the jax
            checkout --jax_repo (left untouched), one per patch of the
            series, in order: the patch's interpreter change, its test
            methods added to upstream's tpu_pallas_interpret_test.py and
            tpu_pallas_interpret_distributed_test.py (no changelog
            entry); the patch's message without the DEP-3 header, authored by
            your git identity. Written with git format-patch into -o DIR
            (default dist/upstream/) for `git am --keep-non-patch`, each
            with a pull request description (.md) beside it. BUILD deps
            follow the imports each commit adds. Measuring is off by
            default: with --test_python, upstream's TPU interpreter tests
            run before and after each commit (its other interpreter tests
            before and after the stack) and the descriptions give the
            counts. Nothing is submitted.
  coverage  Run upstream's hardware TPU Pallas test files of the jax
            checkout --jax_repo (stock, or with the exported stack applied)
            on CPU as if on a TPU (--tpu, default v6e), every pallas_call in
            TPU interpret mode, with --test_python (pytest and the
            checkout's jaxlib); prints per file: total, passed, skipped,
            hardware-only (checks Mosaic lowering or compilation), failed,
            timed out, pass rate; then the failures grouped by cause.
            --files, -k, --timeout (s per test), --devices; --json.
            With --tpu chip the tests run on this machine's TPU instead,
            compiled by Mosaic; --against that run's --json report lists,
            per file, the tests that passed on the TPU and not here.

Exit codes:
  0  success, or nothing to do
  1  internal error (a bug in this tool)
  2  usage error (also --version that is not a release number, and an
     export-upstream --test_python that is not an executable)
  3  the jax version is not served (or not a jax release at all)
  4  a patch does not apply (conflict; for carry and port: a hunk does not
     merge), or jax_fork/jax would be overwritten; nothing was changed
     (carry keeps the fix on the branches before the conflicting one)
  5  environment problem: git or the wheel package missing, a wheel that
     cannot be downloaded or cached, (coverage) pytest cannot run a test
     file with --test_python; nothing was changed
  7  patch data problem: a patch file corrupted or edited, the manifest
     missing, malformed, edited by hand or out of date, (drift) new
     drift between series, or (export-upstream) a new import whose Bazel
     dep it cannot add; nothing was changed

Flags may be written with - or _ (--jax-repo, --jax_repo); -o DIR is
--output_dir=DIR. --json, --patches_dir and --wheel_dir, and the environment
variables, are python -m migration's, but for the default patches directory:
patches/ beside jax_fork/, never an installed copy.
"""

from __future__ import annotations

import functools
import json
import os
import sys

from absl import app
from absl import flags

from jax_fork import carry
from jax_fork import coverage
from jax_fork import drift
from jax_fork import fork
from jax_fork import manifest_gen
from jax_fork import port
from jax_fork import upstream
from migration import cli as migration_cli
from migration import errors
from migration import manifest as manifest_lib
from migration import report

COMMANDS = ('fork', 'refresh', 'carry', 'port', 'drift', 'manifest',
            'export-upstream', 'coverage')
# The repository's patches, beside this package: the default, so that an
# installed copy of migration (its package data) is never what is edited.
_REPO_PATCHES = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'patches')

# The flags python -m migration defines too, with what they mean here.
_SHARED_FLAGS = {
    'json': None,
    'patches_dir': 'The patches folder to edit (default: '
                   '$JAX_INTERPRET_PATCHES_DIR, else patches/ beside '
                   'jax_fork/, never an installed copy).',
    'wheel_dir': None,
    'version': 'fork/port: a jax version; default (fork): the newest served '
               'one.',
    'all': 'fork, refresh: every series, one branch each.',
    'readme': 'port: the Markdown file with the compatibility table '
              '(default: docs/compatibility.md beside patches/).',
    'output_dir': 'export-upstream: the directory for the patches; without '
                  '-o, dist/upstream, not the default shown here (-o).',
}
for _name, _help in _SHARED_FLAGS.items():
  if _help:
    flags.FLAGS[_name].help = _help
  flags.declare_key_flag(_name)
_JSON = flags.FLAGS['json']
_PATCHES_DIR = flags.FLAGS['patches_dir']
_WHEEL_DIR = flags.FLAGS['wheel_dir']
_VERSION = flags.FLAGS['version']
_ALL = flags.FLAGS['all']
_README = flags.FLAGS['readme']
_OUTPUT_DIR = flags.FLAGS['output_dir']

_SERVE = flags.DEFINE_multi_string(
    'serve', [],
    'manifest: SERIES=VERSION[,VERSION...], the jax versions a series '
    'serves (default: as in the existing manifest).')
_RELEASE = flags.DEFINE_integer(
    'release', None,
    'manifest: the project release number N (wheel label +interpret.N); '
    'default: keep the existing one, 1 for a new manifest.')
_JAX_REPO = flags.DEFINE_string(
    'jax_repo', None,
    'export-upstream, coverage: the upstream jax git checkout.')
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
    'and the pull request descriptions give the commands and counts; '
    'coverage: '
    'the Python that runs the tests (default: this one), with pytest and '
    'the jaxlib the checkout needs.')
_BASE_RELEASE = flags.DEFINE_string(
    'base_release', 'newest',
    'export-upstream: what the stack goes on. "newest" (the default): the '
    'checkout with jax/ as the newest served release ships it, when the '
    'checkout is older (a first commit, 0000-Base-jax-as-the-jax-....patch, '
    'not for submission); "checkout": the checkout as it is; or a served '
    'release\'s version.')
_TPU = flags.DEFINE_enum(
    'tpu', 'v6e', [*coverage.TPUS, coverage.CHIP],
    'coverage: the TPU the tests see (device kind and cores per device), or '
    '"chip": run them on this machine\'s TPU, not interpreted.')
_AGAINST = flags.DEFINE_string(
    'against', None,
    'coverage: the --json report of a --tpu chip run of the same files; '
    'runs only the tests that passed there, and lists, per file, those '
    'that do not pass here.')
_FILES = flags.DEFINE_list(
    'files', None,
    'coverage: test files relative to the checkout (default: upstream\'s '
    'hardware TPU Pallas tests, jax_fork/coverage.py\'s DEFAULT_FILES).')
_KEYWORD = flags.DEFINE_string(
    'keyword', None, "coverage: pytest's -k expression.", short_name='k')
_TIMEOUT = flags.DEFINE_float(
    'timeout', 60, 'coverage: seconds each test may take.', lower_bound=1)
_DEVICES = flags.DEFINE_integer(
    'devices', 4, 'coverage: the number of (CPU) devices the tests see.',
    lower_bound=1)
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


def _parse_serve(values: list[str]) -> dict[str, list[str]]:
  out = {}
  for v in values:
    name, sep, versions = v.partition('=')
    if not sep or not versions:
      raise errors.UsageError(
          f'--serve={v}: expected SERIES=VERSION[,VERSION...].')
    out[name] = [x for x in versions.split(',') if x]
  return out


def _fork_dir(patches_dir: str) -> str:
  return os.path.abspath(_FORK_DIR.value or os.path.join(
      os.path.dirname(patches_dir), 'jax_fork'))


def _fork(command: str, patches_dir: str) -> tuple[int, str]:
  manifest = manifest_lib.load(patches_dir)
  fork_dir = _fork_dir(patches_dir)
  if command == 'fork':
    versions = migration_cli.parse_versions(_VERSION.value)
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
            f'{migration_cli.prog()} refresh. Run git inside '
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
    return migration_cli.done_json(
        command, fork_dir=fork_dir, version=info.version,
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
            'jax_fork carry, then run python -m jax_fork refresh --all. '
            f'Run git inside {os.path.join(fork_dir, fork.PACKAGE_DIR)}.')
  else:
    infos = fork.refresh_all(manifest, fork_dir, wheel_dirs)
    text = (f'Wrote {len(infos)} series to {manifest.patches_dir} and '
            f'regenerated {manifest_lib.MANIFEST}:\n'
            + '\n'.join(f'  {i.series}: {len(i.patches)} patch(es)'
                        for i in infos))
  if _JSON.value:
    return migration_cli.done_json(
        command, fork_dir=fork_dir,
        branches=[{'series': i.series, 'version': i.version,
                   'patches': list(i.patches)} for i in infos])
  return 0, text


def _carry(patches_dir: str, revs: list[str]) -> tuple[int, str]:
  if not revs:
    raise errors.UsageError(
        'carry needs the commits to carry: python -m jax_fork carry '
        'COMMIT|A..B [...] [--onto=BRANCH,...].')
  manifest = manifest_lib.load(patches_dir)
  fork_dir = _fork_dir(patches_dir)
  onto = [] if _ONTO.value == ['all'] else list(_ONTO.value)
  result = carry.carry(manifest, fork_dir, revs, onto or None)
  if _JSON.value:
    return migration_cli.done_json(
        'carry', commits=list(result.commits), source=result.source,
        branches=list(result.branches))
  return 0, (f'Carried {len(result.commits)} commit(s) '
             f'({"; ".join(result.subjects)}) from {result.source} to '
             f'{", ".join(result.branches) or "no other branch"}. Next: '
             'python -m jax_fork refresh --all.')


def _port(patches_dir: str) -> tuple[int, str]:
  versions = migration_cli.parse_versions(_VERSION.value)
  if len(versions) != 1:
    raise errors.UsageError('port needs one --version=V.')
  manifest = manifest_lib.load(patches_dir)
  result = port.port(manifest, versions[0], tuple(_WHEEL_DIR.value),
                     _README.value)
  if _JSON.value:
    return migration_cli.done_json(
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
             + '.\nCarry the change to every series (python -m jax_fork '
             'carry), or, if the difference is intended, record it with '
             'python -m jax_fork drift --update (see jax_fork/README.md); '
             'python -m jax_fork drift --series=SERIES shows the lines.')
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
  jax_repo = os.path.abspath(_JAX_REPO.value)
  manifest = manifest_lib.load(patches_dir)
  base_release = _BASE_RELEASE.value
  if base_release == 'newest':
    base_release = upstream.newest_release(manifest, jax_repo)
  elif base_release == 'checkout':
    base_release = None
  written = upstream.export(jax_repo, output_dir, tests_dir, manifest,
                            _SERIES.value, _TEST_PYTHON.value, base_release)
  if _JSON.value:
    return migration_cli.done_json('export-upstream', patches=written)
  return 0, ('Wrote one commit per patch, each with its pull request '
             'description (.md) beside it; apply them in order in the jax '
             'checkout with git am --keep-non-patch:\n'
             + '\n'.join(f'  {p}' for p in written))


def _coverage() -> tuple[int, str]:
  if not _JAX_REPO.value:
    raise errors.UsageError('coverage needs --jax_repo PATH.')
  jax_repo = os.path.abspath(_JAX_REPO.value)
  if not os.path.isdir(jax_repo):
    raise errors.UsageError(f'No directory {jax_repo}.')
  chip = None
  if _AGAINST.value:
    try:
      with open(_AGAINST.value, encoding='utf-8') as f:
        chip = json.load(f)
      chip['tests']  # pylint: disable=pointless-statement
    except (OSError, ValueError, KeyError, TypeError) as e:
      raise errors.UsageError(
          f'--against {_AGAINST.value} is not the --json report of a '
          f'coverage run: {e}') from e
  python = _TEST_PYTHON.value or coverage.default_python()
  files = tuple(_FILES.value or coverage.DEFAULT_FILES)
  on_chip = _TPU.value == coverage.CHIP
  info = {'jax_repo': jax_repo, 'jax_commit': coverage.jax_commit(jax_repo),
          'tpu': _TPU.value, 'keyword': _KEYWORD.value,
          'timeout': _TIMEOUT.value, 'devices': _DEVICES.value}
  if on_chip:
    info.update(coverage.device_info(python, jax_repo))
  # Against a chip run, only the tests that passed there run here.
  only = coverage.chip_passed(chip) if chip is not None else None
  outcomes = coverage.run(jax_repo, python, _TPU.value, files,
                          _KEYWORD.value, _TIMEOUT.value, _DEVICES.value,
                          only=only)
  rows = coverage.against(outcomes, chip) if chip is not None else None
  if _JSON.value:
    extra = {} if rows is None else {'against': rows}
    return migration_cli.done_json(
        'coverage', **coverage.to_json(outcomes, **info), **extra)
  where = (f'on the TPU ({info["device_kind"]})' if on_chip else
           f'as if on a TPU {_TPU.value}, in TPU interpret mode')
  text = (f'Upstream\'s TPU tests at {info["jax_commit"] or jax_repo}, '
          f'{where}:\n' + coverage.table_text(outcomes))
  if rows is not None:
    text += '\n\n' + coverage.against_text(rows, chip)
  return 0, text


def _manifest(patches_dir: str) -> tuple[int, str]:
  data = manifest_gen.generate(patches_dir, _parse_serve(_SERVE.value),
                               _RELEASE.value, tuple(_WHEEL_DIR.value))
  if _JSON.value:
    return migration_cli.done_json('manifest', manifest=data)
  lines = [f'Wrote {patches_dir}/{manifest_lib.MANIFEST} '
           f'(release {data["release"]}).']
  for name, s in data['series'].items():
    lines.append(f'  {name}: {len(s["patches"])} patches, serves jax '
                 + ', '.join(s['versions']))
  return 0, '\n'.join(lines)


def _usage() -> str:
  return (__doc__ + '\nflags:\n'
          + flags.FLAGS.module_help(sys.modules[__name__]) + '\n')


def _run(args: list[str]) -> tuple[int, str]:
  """Runs the command ``args[0]``; returns its exit code and report."""
  command = args[0] if args else ''
  if (len(args) != 1 and command != 'carry') or command not in COMMANDS:
    raise errors.UsageError(
        f'Expected one command out of {", ".join(COMMANDS)}; got '
        f'{" ".join(args) or "none"}. Run python -m jax_fork --help.')
  if command == 'coverage':
    return _coverage()
  patches_dir = manifest_lib.locate_patches_dir(
      _PATCHES_DIR.value or os.environ.get(manifest_lib.PATCHES_DIR_ENV)
      or _REPO_PATCHES)
  if command in ('fork', 'refresh'):
    return _fork(command, patches_dir)
  if command == 'drift':
    return _drift(patches_dir)
  if command == 'port':
    return _port(patches_dir)
  if command == 'carry':
    return _carry(patches_dir, args[1:])
  if command == 'manifest':
    return _manifest(patches_dir)
  return _export_upstream(patches_dir)


def main(argv: list[str]) -> int:
  """Runs one command; returns the process exit code."""
  args = argv[1:]
  return migration_cli.execute(args[0] if args else '', lambda: _run(args))


def run() -> None:
  """Entry point of ``python -m jax_fork``."""
  app.run(main, flags_parser=functools.partial(migration_cli.parse_flags,
                                               usage=_usage))
