"""Runs every test of this repository with the running Python and sums up.

Each file in `tests/pallas/` runs in its own pytest process, as upstream runs
each file as its own test target: files that request several CPU devices
cannot share a process with files that need one. `--jobs` of those processes
run side by side (as `bazel test --local_test_jobs=2` runs the targets); each
one's output is printed whole when it ends, in file order. Then the migration
tests, the jax_fork tests, the examples and the check against recordings of a
TPU (`tests/hardware_parity_test.py`) run one at a time, their output
streamed: they make venvs and git repositories and run the main job's
kernels, and the migration tests time their fault injection. ruff runs first.
Each stage starts with `== NAME` and ends with `== NAME: N passed, N failed, N
skipped (S s; total T s)`; the last line is `tests: N passed, N failed, N
skipped`, the sum of the stages.

Counted are tests as pytest's `N passed` line counts them: test functions
and each parameterized case, from the `<testcase>` elements of pytest's JUnit
XML; pytest's subtests (`self.subTest`) are not counted on their own (a
failed subtest fails its test). ruff counts as one test.

Usage: python scripts/run_tests.py [--scope=all|kernels] [--jobs=N]
           [--files=carried|all] [-- PYTEST_ARGS...]

--scope=kernels runs only the interpreter tests, the examples and the
check against recordings of a TPU (what differs between jax releases of one
minor line); all adds the tests of the migration tool and of the
maintainers' jax_fork, and ruff.

--files=carried (the default) runs, of `tests/pallas`, only the files of the
changes that the installed jax release's series carries
(`jax_fork.upstream.carried_test_files`): each other file fences its tests
on the jax release and would only skip them, at the cost of a pytest and jax
start-up. Their names are printed. On a jax release that no series serves,
every file runs; --files=all runs every file on any release.
"""

from __future__ import annotations

from concurrent import futures
import importlib.metadata
import os
import pathlib
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

from absl import app
from absl import flags

_SCOPE = flags.DEFINE_enum(
    'scope', 'all', ['all', 'kernels'],
    'all: every test and ruff; kernels: tests/pallas, the examples and the'
    ' hardware parity check.')
_JOBS = flags.DEFINE_integer(
    'jobs', min(2, os.cpu_count() or 1),
    'How many files of tests/pallas run side by side, each in its own pytest'
    ' process (default: 2, or 1 on a 1-CPU machine).', lower_bound=1)

_FILES = flags.DEFINE_enum(
    'files', 'carried', ['carried', 'all'],
    'carried: of tests/pallas, only the files of the changes the installed'
    " jax release's series carries (the others skip whole there); all: every"
    ' file.')

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from jax_fork import upstream  # noqa: E402
from migration import manifest as manifest_lib  # noqa: E402


def _carried(files: list[pathlib.Path]) -> tuple[list[pathlib.Path], str]:
  """Keeps the test files of the changes the installed jax's series carries.

  Args:
    files: test files of `tests/pallas`.

  Returns:
    The files to run, in order (a file that no change names runs too), and
    why the others do not run ('' if all run: jax is not installed, its
    release is not served, or its series carries every change).

  Raises:
    PatchDataError: see `upstream.carried_test_files`.
  """
  try:
    # A patched wheel's local version (0.12.0.1+interpret.2) is its release's.
    version = importlib.metadata.version('jax').split('+')[0]
  except importlib.metadata.PackageNotFoundError:
    return files, ''
  manifest = manifest_lib.load(str(ROOT / 'patches'))
  series = manifest.series_for(version)
  if series is None:
    return files, ''
  known = {t.file for change in upstream.CHANGES for t in change.tests}
  not_carried = known - upstream.carried_test_files(manifest, series)
  left = [f.name for f in files if f.name in not_carried]
  kept = [f for f in files if f.name not in not_carried]
  if not left:
    return kept, ''
  return kept, (f'not run: {len(left)} files of changes that the series'
                f' {series.name} of jax {version} does not carry (their tests'
                f' would skip): {", ".join(left)}')


def _counts(junit_xml: pathlib.Path) -> tuple[int, int, int]:
  """Returns (passed, failed, skipped) tests from a pytest JUnit XML report.

  Args:
    junit_xml: The report; missing (pytest did not get to write it) counts
      as one failure.

  Returns:
    Counts of `<testcase>` elements: failed if one has a `failure` or `error`
    child, skipped if a `skipped` one, else passed. Subtests have no element
    of their own; if the suites report failures that no test case shows
    (e.g. a failed subtest), one more failure is counted.
  """
  if not junit_xml.exists():
    return 0, 1, 0
  root = ET.parse(junit_xml).getroot()
  passed = failed = skipped = 0
  for case in root.iter('testcase'):
    tags = {child.tag for child in case}
    if tags & {'failure', 'error'}:
      failed += 1
    elif 'skipped' in tags:
      skipped += 1
    else:
      passed += 1
  suites = [root] if root.tag == 'testsuite' else list(root)
  reported = sum(int(suite.get('failures', 0)) + int(suite.get('errors', 0))
                 for suite in suites)
  if reported and not failed:
    failed = 1
  return passed, failed, skipped


def _pytest(target: pathlib.Path, report: pathlib.Path, argv: list[str],
            capture: bool) -> tuple[str, float]:
  """Runs pytest on `target`, writing its JUnit XML report to `report`.

  Args:
    target: A test file or directory.
    report: Where pytest writes its JUnit XML report.
    argv: Extra pytest arguments.
    capture: Whether to return pytest's output (stdout and stderr, merged)
      instead of letting it through as it comes.

  Returns:
    pytest's output ('' if not captured) and its wall time in seconds.
  """
  start = time.monotonic()
  cmd = [sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider',
         f'--junitxml={report}', str(target), *argv]
  proc = subprocess.run(
      cmd, cwd=ROOT, check=False, text=True,
      stdout=subprocess.PIPE if capture else None,
      stderr=subprocess.STDOUT if capture else None)
  return proc.stdout or '', time.monotonic() - start


def main(argv: list[str]) -> int:
  argv = argv[1:]
  side_by_side = sorted((ROOT / 'tests' / 'pallas').glob('*_test.py'))
  if _FILES.value == 'carried':
    side_by_side, not_run = _carried(side_by_side)
    if not_run:
      print(f'== {not_run}', flush=True)
  one_at_a_time = []
  if _SCOPE.value == 'all':
    one_at_a_time.append(ROOT / 'tests' / 'migration')
    one_at_a_time.append(ROOT / 'tests' / 'jax_fork')
  one_at_a_time.append(ROOT / 'tests' / 'examples_test.py')
  one_at_a_time.append(ROOT / 'tests' / 'hardware_parity_test.py')
  totals = [0, 0, 0]
  run_start = time.monotonic()

  def stage_ended(name: str, counts: tuple[int, int, int],
                  seconds: float) -> None:
    now = time.monotonic()
    print(f'== {name}: {counts[0]} passed, {counts[1]} failed, {counts[2]}'
          f' skipped ({seconds:.1f} s; total {now - run_start:.1f} s)',
          flush=True)
    for i in range(3):
      totals[i] += counts[i]

  if _SCOPE.value == 'all':
    # Lint first: it takes a second and fails fast.
    start = time.monotonic()
    print('== ruff check', flush=True)
    lint = subprocess.run(
        [sys.executable, '-m', 'ruff', 'check', '.'], cwd=ROOT, check=False
    )
    stage_ended('ruff check', (0, 1, 0) if lint.returncode else (1, 0, 0),
                time.monotonic() - start)
  with tempfile.TemporaryDirectory() as tmp:
    reports = [pathlib.Path(tmp) / f'{i}.xml'
               for i in range(len(side_by_side) + len(one_at_a_time))]
    with futures.ThreadPoolExecutor(max_workers=_JOBS.value) as pool:
      runs = [pool.submit(_pytest, target, report, argv, True)
              for target, report in zip(side_by_side, reports)]
      for target, report, run in zip(side_by_side, reports, runs):
        output, seconds = run.result()
        print(f'== {target.relative_to(ROOT)}', flush=True)
        print(output, end='', flush=True)
        stage_ended(str(target.relative_to(ROOT)), _counts(report), seconds)
    for target, report in zip(one_at_a_time, reports[len(side_by_side):]):
      print(f'== {target.relative_to(ROOT)}', flush=True)
      _, seconds = _pytest(target, report, argv, False)
      stage_ended(str(target.relative_to(ROOT)), _counts(report), seconds)

  print(f'== all stages: {time.monotonic() - run_start:.1f} s')
  # Alone on the last line, the form CI's log reader counts.
  print(f'tests: {totals[0]} passed, {totals[1]} failed, {totals[2]} skipped')
  return 1 if totals[1] or not totals[0] else 0

if __name__ == '__main__':
  app.run(main)
