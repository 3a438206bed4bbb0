"""Runs every test of this repository with the running Python and sums up.

Each file in `tests/pallas/` runs in its own pytest process, as upstream runs
each file as its own test target: files that request several CPU devices
cannot share a process with files that need one. The migration tests, the
jax_fork tests and ruff run once each. Each stage starts with `== NAME` and
ends with `== NAME: N passed, N failed, N skipped (S s; total T s)`; the last
line is `tests: N passed, N failed, N skipped`, the sum of the stages.

Counted are tests as pytest's `N passed` line counts them: test functions
and each parameterized case, from the `<testcase>` elements of pytest's JUnit
XML; pytest's subtests (`self.subTest`) are not counted on their own (a
failed subtest fails its test). ruff counts as one test.

Usage: python scripts/run_tests.py [--scope=all|kernels] [-- PYTEST_ARGS...]

--scope=kernels runs only the interpreter tests and the examples (what
differs between jax releases of one minor line); all adds the tests of the
migration tool and of the maintainers' jax_fork, and ruff.
"""

from __future__ import annotations

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
    'all: every test and ruff; kernels: tests/pallas and the examples.')

ROOT = pathlib.Path(__file__).resolve().parent.parent


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


def _stage_end(name: str, counts: tuple[int, int, int], start: float,
               run_start: float) -> str:
  """Returns the closing line of a stage, with its and the run's time."""
  now = time.monotonic()
  return (f'== {name}: {counts[0]} passed, {counts[1]} failed, {counts[2]}'
          f' skipped ({now - start:.1f} s; total {now - run_start:.1f} s)')


def main(argv: list[str]) -> int:
  argv = argv[1:]
  targets = sorted((ROOT / 'tests' / 'pallas').glob('*_test.py'))
  if _SCOPE.value == 'all':
    targets.append(ROOT / 'tests' / 'migration')
    targets.append(ROOT / 'tests' / 'jax_fork')
  targets.append(ROOT / 'tests' / 'examples_test.py')
  passed = failed = skipped = 0
  run_start = time.monotonic()
  if _SCOPE.value == 'all':
    # Lint first: it takes a second and fails fast.
    start = time.monotonic()
    print('== ruff check', flush=True)
    lint = subprocess.run(
        [sys.executable, '-m', 'ruff', 'check', '.'], cwd=ROOT, check=False
    )
    counts = (0, 1, 0) if lint.returncode else (1, 0, 0)
    print(_stage_end('ruff check', counts, start, run_start), flush=True)
    passed, failed = counts[0], counts[1]
  with tempfile.TemporaryDirectory() as tmp:
    for i, target in enumerate(targets):
      start = time.monotonic()
      name = str(target.relative_to(ROOT))
      report = pathlib.Path(tmp) / f'{i}.xml'
      cmd = [sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider',
             f'--junitxml={report}', str(target), *argv]
      print(f'== {name}', flush=True)
      subprocess.run(cmd, cwd=ROOT, check=False)
      counts = _counts(report)
      print(_stage_end(name, counts, start, run_start), flush=True)
      passed += counts[0]
      failed += counts[1]
      skipped += counts[2]

  print(f'== all stages: {time.monotonic() - run_start:.1f} s')
  # Alone on the last line, the form CI's log reader counts.
  print(f'tests: {passed} passed, {failed} failed, {skipped} skipped')
  return 1 if failed or not passed else 0


if __name__ == '__main__':
  app.run(main)
