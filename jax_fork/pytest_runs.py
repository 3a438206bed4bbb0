"""Runs upstream's interpreter tests in a jax checkout and counts the results.

``export-upstream --test_python PY`` measures, in its scratch worktree, the
tests each pull request description claims: pytest runs with ``PY`` and
``PYTHONPATH`` set to the checkout (as upstream's CPU CI runs its tests from
the source tree against an installed jaxlib), one process per test file (the
GPU interpreter's files skip most of their tests when run in one process with
the others). Each result is pytest's own count line and the ids of the tests
that failed or errored (``-rfE``); a run that gives no count line (pytest
could not start, crashed, or ran out of time) is recorded as not measured,
with the reason, and never as a number.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import re
import shlex
import subprocess
import time

from migration import errors

TEST_DIR = os.path.join('tests', 'pallas')
# The TPU interpreter's own tests, run before and after each commit. The
# distributed file's emit_pipeline tests hang on 2-core machines even without
# the stack.
TPU_COMMANDS = (
    (os.path.join(TEST_DIR, 'tpu_pallas_interpret_test.py'),),
    (os.path.join(TEST_DIR, 'tpu_pallas_interpret_distributed_test.py'),
     '-k', 'not emit_pipeline'),
)
# The other test files of the interpreters (the GPU interpreter's, its race
# detection, the TPU interpreter's thread_map), found in the checkout.
OTHER_PATTERN = os.path.join(TEST_DIR, '*_interpret*_test.py')
# Per test file; a run that takes longer is reported as not measured.
TIMEOUT_SECONDS = 3600
COUNT_KINDS = ('passed', 'failed', 'errors', 'skipped', 'xfailed', 'xpassed',
               'deselected')
_COUNT = re.compile(r'(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|'
                    r'deselected|warnings?)\b')
_SUMMARY = re.compile(r'^=*\s*\d+ \w+.* in [\d.]+s\b')


@dataclasses.dataclass(frozen=True)
class TestRun:
  """One pytest command's result.

  Attributes:
    command: the command as a person runs it in the checkout.
    counts: pytest's counts by kind (``COUNT_KINDS``), or None if the run
      gave none.
    failures: the ids of the tests that failed or errored.
    problem: why there are no counts ('' if there are).
    seconds: the run's wall time.
  """
  command: str
  counts: dict[str, int] | None
  failures: frozenset[str] = frozenset()
  problem: str = ''
  seconds: float = 0.0

  def summary(self) -> str:
    """Returns the counts as pytest prints them, or why there are none."""
    if self.counts is None:
      return f'not measured ({self.problem})'
    return ', '.join(f'{self.counts[k]} {k}' for k in COUNT_KINDS
                     if self.counts.get(k)) or 'no tests'


def command_line(args: tuple[str, ...]) -> str:
  """Returns the command a person runs in the checkout for pytest args."""
  return 'PYTHONPATH=$PWD python -m pytest -q ' + shlex.join(args)


def parse(command: str, returncode: int, output: str,
          seconds: float = 0.0) -> TestRun:
  """Returns the result of a ``pytest -q -rfE`` run from its output.

  Args:
    command: the command, for the report.
    returncode: pytest's exit code (0 all passed, 1 some failed, 5 no tests;
      anything else means the run did not complete).
    output: its standard output.
    seconds: its wall time.
  """
  lines = output.splitlines()
  summary = [l for l in lines if _SUMMARY.match(l)]
  if returncode not in (0, 1, 5) or (not summary and returncode != 5):
    last = next((l.strip() for l in reversed(lines) if l.strip()), '')
    return TestRun(command, None,
                   problem=f'pytest exit code {returncode}'
                   + (f': {last[:200]}' if last else ''), seconds=seconds)
  counts = dict.fromkeys(COUNT_KINDS, 0)
  for number, kind in _COUNT.findall(summary[-1] if summary else ''):
    kind = {'error': 'errors', 'warning': 'warnings'}.get(kind, kind)
    if kind in counts:
      counts[kind] = int(number)
  failures = frozenset(m.group(2) for m in (
      re.match(r'^(FAILED|ERROR) (\S+)', l) for l in lines) if m)
  return TestRun(command, counts, failures, seconds=seconds)


def run(checkout: str, python: str, args: tuple[str, ...],
        timeout: float = TIMEOUT_SECONDS) -> TestRun:
  """Runs one pytest command in the checkout with ``python``."""
  command = command_line(args)
  env = dict(os.environ, PYTHONPATH=checkout)
  start = time.monotonic()
  try:
    proc = subprocess.run(
        [python, '-m', 'pytest', '-q', '-rfE', '-p', 'no:cacheprovider',
         *args], cwd=checkout, env=env, capture_output=True, text=True,
        timeout=timeout, check=False)
  except subprocess.TimeoutExpired:
    return TestRun(command, None, problem=f'timed out after {timeout:.0f} s',
                   seconds=time.monotonic() - start)
  except OSError as e:
    raise errors.UsageError(f'Cannot run the tests with {python}: {e}') from e
  return parse(command, proc.returncode, proc.stdout,
               time.monotonic() - start)


def other_commands(checkout: str) -> list[tuple[str, ...]]:
  """Returns a pytest command per other interpreter test file of upstream."""
  tpu = {c[0] for c in TPU_COMMANDS}
  return [(os.path.relpath(f, checkout),) for f in sorted(
      glob.glob(os.path.join(checkout, OTHER_PATTERN)))
          if os.path.relpath(f, checkout) not in tpu]


def new_failures(before: TestRun, after: TestRun) -> str:
  """Returns the tests failing after and not before, as a table cell."""
  if before.counts is None or after.counts is None:
    return 'not known'
  new = sorted(after.failures - before.failures)
  return (str(len(new)) + (': ' + ', '.join(f'`{t}`' for t in new)
                           if new else ''))


def table(rows: list[tuple[TestRun, TestRun]], before: str,
          after: str) -> list[str]:
  """Returns a Markdown table of runs before and after a change.

  Args:
    rows: ``(before, after)`` per command.
    before: the heading of the before column.
    after: the heading of the after column.
  """
  return [f'| command | {before} | {after} | new failures |',
          '| --- | --- | --- | --- |',
          *(f'| `{a.command}` | {b.summary()} | {a.summary()} | '
            f'{new_failures(b, a)} |' for b, a in rows)]


def environment(python: str) -> str:
  """Returns the jaxlib and Python versions of ``python``, for the report."""
  proc = subprocess.run(
      [python, '-c', 'import importlib.metadata as m, platform; '
       'print(m.version("jaxlib"), platform.python_version())'],
      capture_output=True, text=True, check=False)
  words = proc.stdout.split()
  if proc.returncode or len(words) != 2:
    return f'jaxlib unknown ({python} could not tell)'
  return f'jaxlib {words[0]}, Python {words[1]}'
