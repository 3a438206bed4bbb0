"""Runs every test of this repository with the running Python and sums up.

Each file in `tests/pallas/` runs in its own pytest process, as upstream runs
each file as its own test target: files that request several CPU devices
cannot share a process with files that need one. The migration tests and
ruff run once each. The last line is `tests: N passed, N failed, N skipped`.

Usage: python scripts/run_tests.py [--scope=all|kernels] [-- PYTEST_ARGS...]

--scope=kernels runs only the interpreter tests and the examples (what
differs between jax releases of one minor line); all adds the migration
tool's tests and ruff.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

from absl import app
from absl import flags

_SCOPE = flags.DEFINE_enum(
    'scope', 'all', ['all', 'kernels'],
    'all: every test and ruff; kernels: tests/pallas and the examples.')

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _counts(junit_xml: pathlib.Path) -> tuple[int, int, int]:
  """Returns (passed, failed, skipped) from a pytest JUnit XML report."""
  if not junit_xml.exists():
    return 0, 1, 0
  root = ET.parse(junit_xml).getroot()
  suites = [root] if root.tag == 'testsuite' else list(root)
  total = failed = skipped = 0
  for suite in suites:
    total += int(suite.get('tests', 0))
    failed += int(suite.get('failures', 0)) + int(suite.get('errors', 0))
    skipped += int(suite.get('skipped', 0))
  return total - failed - skipped, failed, skipped


def main(argv: list[str]) -> int:
  argv = argv[1:]
  targets = sorted((ROOT / 'tests' / 'pallas').glob('*_test.py'))
  if _SCOPE.value == 'all':
    targets.append(ROOT / 'tests' / 'migration')
  targets.append(ROOT / 'tests' / 'examples_test.py')
  passed = failed = skipped = 0
  with tempfile.TemporaryDirectory() as tmp:
    for i, target in enumerate(targets):
      report = pathlib.Path(tmp) / f'{i}.xml'
      cmd = [sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider',
             f'--junitxml={report}', str(target), *argv]
      print(f'== {target.relative_to(ROOT)}', flush=True)
      subprocess.run(cmd, cwd=ROOT, check=False)
      p, f, s = _counts(report)
      passed, failed, skipped = passed + p, failed + f, skipped + s

  if _SCOPE.value == 'all':
    print('== ruff check', flush=True)
    lint = subprocess.run(
        [sys.executable, '-m', 'ruff', 'check', '.'], cwd=ROOT, check=False
    )
    if lint.returncode:
      failed += 1
    else:
      passed += 1

  print(f'tests: {passed} passed, {failed} failed, {skipped} skipped')
  return 1 if failed or not passed else 0


if __name__ == '__main__':
  app.run(main)
