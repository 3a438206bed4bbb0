# Copyright 2026 The JAX Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     https://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

"""Runs every example in this directory and summarizes the results.

Each example runs in its own subprocess with the running Python, because each
sets its own number of simulated CPU devices before importing jax. By
default all of them run at once: each keeps about one CPU busy, so on two
CPUs three examples end sooner together than two at a time (`--jobs N` runs
at most N at once). Their output is streamed as it comes, each line prefixed
with the example's name. An example fails if it exits non-zero (a mismatch or
an error) or runs longer than the timeout, so a kernel that hangs fails
instead of hanging the run.

The run ends with a summary: per example the feature it shows (its `FEATURE`
constant), `ok`, `MISMATCH` (a result differs from its independently computed
value), `ERROR` (it failed otherwise) or `TIMEOUT`, and its wall time; then
the total wall time.

Usage::

  python examples/run_all.py [--timeout SECONDS] [--jobs N] [NAME ...]

Exits 0 if every example matched, 1 otherwise.
"""

import argparse
import ast
import concurrent.futures
import dataclasses
import os
import pathlib
import subprocess
import sys
import threading
import time

EXAMPLES_DIR = pathlib.Path(__file__).resolve().parent
DEFAULT_TIMEOUT_S = 300.0
# The exit code of an example whose results differ from the expected values
# (`_report.MISMATCH_EXIT_CODE`; not imported: importing it imports jax).
MISMATCH_EXIT_CODE = 3


@dataclasses.dataclass(frozen=True)
class Result:
  """How one example ended.

  Attributes:
    name: The example's module name.
    feature: What it shows (its `FEATURE` constant).
    status: 'ok', 'MISMATCH', 'ERROR (exit code N)' or 'TIMEOUT (N s)'.
    seconds: Wall time of its process.
  """
  name: str
  feature: str
  status: str
  seconds: float

  @property
  def ok(self) -> bool:
    return self.status == 'ok'


def find_examples() -> list[pathlib.Path]:
  """Returns the example modules, excluding this file and `_`-prefixed ones."""
  this = pathlib.Path(__file__).resolve()
  return sorted(
      p for p in EXAMPLES_DIR.glob('*.py')
      if p.resolve() != this and not p.name.startswith('_')
  )


def feature_of(path: pathlib.Path) -> str:
  """Returns the example's module-level `FEATURE` string, read without import.

  Args:
    path: The example's file.

  Returns:
    The string, or '?' if the module assigns none.
  """
  tree = ast.parse(path.read_text(encoding='utf-8'))
  for node in tree.body:
    if (isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == 'FEATURE'
                for t in node.targets)
        and isinstance(node.value, ast.Constant)):
      return str(node.value.value)
  return '?'


def run_example(path: pathlib.Path, timeout_s: float) -> Result:
  """Runs one example, streaming its output with a prefix.

  Args:
    path: The example's file.
    timeout_s: Seconds after which the example is killed and failed.

  Returns:
    How it ended.
  """
  start = time.monotonic()
  print(f'=== {path.stem}: started', flush=True)
  env = dict(os.environ, PYTHONUNBUFFERED='1')
  proc = subprocess.Popen(
      [sys.executable, str(path)],
      cwd=EXAMPLES_DIR,
      env=env,
      stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT,
      text=True,
      errors='replace',
  )

  def stream():
    for line in proc.stdout:
      print(f'[{path.stem}] {line}', end='', flush=True)

  reader = threading.Thread(target=stream, daemon=True)
  reader.start()
  try:
    returncode = proc.wait(timeout=timeout_s)
  except subprocess.TimeoutExpired:
    proc.kill()
    proc.wait()
    reader.join(timeout=5)
    status = f'TIMEOUT ({timeout_s:g} s)'
  else:
    reader.join()
    if returncode == 0:
      status = 'ok'
    elif returncode == MISMATCH_EXIT_CODE:
      status = 'MISMATCH'
    else:
      status = f'ERROR (exit code {returncode})'
  seconds = time.monotonic() - start
  print(f'=== {path.stem}: {status} ({seconds:.1f} s)', flush=True)
  return Result(path.stem, feature_of(path), status, seconds)


def summary(results: list[Result], seconds: float) -> str:
  """Returns the closing summary: a line per example, then the totals.

  Args:
    results: How each example ended, in order.
    seconds: Wall time of the whole run.

  Returns:
    Text ending in `examples: N ok, N mismatched, N failed (total S s)`.
  """
  name_w = max((len(r.name) for r in results), default=0)
  status_w = max((len(r.status) for r in results), default=0)
  lines = ['summary (feature shown, result, wall time):']
  for r in results:
    lines.append(f'  {r.name:<{name_w}}  {r.status:<{status_w}}  '
                 f'{r.seconds:5.1f} s  {r.feature}')
  mismatched = sum(r.status == 'MISMATCH' for r in results)
  failed = sum(not r.ok for r in results) - mismatched
  lines.append(f'examples: {sum(r.ok for r in results)} ok, {mismatched} '
               f'mismatched, {failed} failed (total {seconds:.1f} s)')
  return '\n'.join(lines)


def main(argv: list[str] | None = None) -> int:
  """Runs the examples named in `argv` (default: all); returns the exit code."""
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument(
      '--timeout', type=float, default=DEFAULT_TIMEOUT_S,
      help='seconds each example may run (default: %(default)s)',
  )
  parser.add_argument(
      '--jobs', type=int, default=None,
      help='at most this many examples run at once (default: all)',
  )
  parser.add_argument(
      'names', nargs='*', help='examples to run (default: all)'
  )
  args = parser.parse_args(argv)
  if args.jobs is not None and args.jobs < 1:
    parser.error('--jobs must be at least 1')

  examples = find_examples()
  if args.names:
    unknown = set(args.names) - {p.stem for p in examples}
    if unknown:
      parser.error(f'unknown examples: {", ".join(sorted(unknown))}')
    examples = [p for p in examples if p.stem in args.names]

  start = time.monotonic()
  jobs = args.jobs or max(1, len(examples))
  with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
    results = list(pool.map(lambda p: run_example(p, args.timeout), examples))
  print(summary(results, time.monotonic() - start), flush=True)
  return 0 if results and all(r.ok for r in results) else 1


if __name__ == '__main__':
  sys.exit(main())
