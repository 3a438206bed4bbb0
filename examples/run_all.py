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

Each example runs in its own process, because each sets its own number of
simulated CPU devices before jax starts its backend: this script imports jax
and `_report` once (about 3 s of CPU), then forks one child per example
before it starts any thread or backend, and each child runs its example as
`__main__`. By default all of them run at once: each keeps about one CPU
busy, so on two CPUs three examples end sooner together than two at a time
(`--jobs N` runs at most N at once). Their output is streamed as it comes,
each line prefixed with the example's name. An example fails if it exits
non-zero (a mismatch or an error) or runs longer than the timeout (it is
then killed), so a kernel that hangs fails instead of hanging the run.

The run ends with a summary: per example the feature it shows (its `FEATURE`
constant), `ok`, `MISMATCH` (a result differs from its independently computed
value), `skipped` (this jax cannot run it; it printed why), `ERROR` (it failed
otherwise) or `TIMEOUT`, and its wall time; then the total wall time.

Usage::

  python examples/run_all.py [--timeout SECONDS] [--jobs N] [NAME ...]

Exits 0 if every example matched or was skipped, 1 otherwise.
"""

import argparse
import ast
import dataclasses
import os
import pathlib
import runpy
import signal
import sys
import threading
import time
import traceback

EXAMPLES_DIR = pathlib.Path(__file__).resolve().parent
DEFAULT_TIMEOUT_S = 300.0
# The exit code of an example whose results differ from the expected values
# (`_report.MISMATCH_EXIT_CODE`, read once `_report` is imported).
MISMATCH_EXIT_CODE = 3
# The exit code of an example that this jax cannot run
# (`_report.SKIPPED_EXIT_CODE`).
SKIPPED_EXIT_CODE = 4
# The first line a child writes once it holds a job slot and starts.
_STARTED = '\0started'
_POLL_S = 0.05


@dataclasses.dataclass(frozen=True)
class Result:
  """How one example ended.

  Attributes:
    name: The example's module name.
    feature: What it shows (its `FEATURE` constant).
    status: 'ok', 'MISMATCH', 'skipped', 'ERROR (exit code N)' or
      'TIMEOUT (N s)'.
    seconds: Wall time from its start to its end.
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


def _preload() -> None:
  """Imports what every example imports, once, before the children fork."""
  global MISMATCH_EXIT_CODE, SKIPPED_EXIT_CODE
  sys.path.insert(0, str(EXAMPLES_DIR))
  try:
    import _report  # pylint: disable=g-import-not-at-top
  except Exception:  # pylint: disable=broad-except
    # Each child then imports, and reports, on its own.
    traceback.print_exc()
    return
  MISMATCH_EXIT_CODE = _report.MISMATCH_EXIT_CODE
  SKIPPED_EXIT_CODE = _report.SKIPPED_EXIT_CODE


def _run_child(path: pathlib.Path, out_fd: int, slots: tuple[int, int]):
  """In a forked child: waits for a job slot, runs `path` as `__main__`.

  Never returns: exits with the example's exit code (1 on an uncaught
  error), after giving the slot back.

  Args:
    path: The example's file.
    out_fd: Where its stdout and stderr go.
    slots: The read and write ends of the pipe of job slots (one byte each).
  """
  code = 1
  try:
    os.dup2(out_fd, 1)
    os.dup2(out_fd, 2)
    os.close(out_fd)
    sys.stdout.reconfigure(line_buffering=True)
    sys.stderr.reconfigure(line_buffering=True)
    os.read(slots[0], 1)
    print(_STARTED, flush=True)
    os.chdir(EXAMPLES_DIR)
    sys.argv = [str(path)]
    try:
      runpy.run_path(str(path), run_name='__main__')
      code = 0
    except SystemExit as e:
      code = e.code if isinstance(e.code, int) else (0 if e.code is None
                                                     else 1)
      if e.code is not None and not isinstance(e.code, int):
        print(e.code, file=sys.stderr)
  except BaseException:  # pylint: disable=broad-except
    traceback.print_exc()
    code = 1
  finally:
    try:
      sys.stdout.flush()
      sys.stderr.flush()
      os.write(slots[1], b'.')
    finally:
      os._exit(code)  # pylint: disable=protected-access


class _Child:
  """A forked example: streams its output, waits for it, times it out."""

  def __init__(self, path: pathlib.Path, slots: tuple[int, int]):
    self.path = path
    self.slots = slots
    self.started = threading.Event()
    self.start = 0.0
    read_fd, write_fd = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    self.pid = os.fork()
    if self.pid == 0:
      os.close(read_fd)
      _run_child(path, write_fd, slots)
    os.close(write_fd)
    self.output = os.fdopen(read_fd, 'r', errors='replace')

  def stream(self) -> None:
    """Prints the child's output, each line prefixed with its name."""
    for line in self.output:
      if line.rstrip('\n') == _STARTED and not self.started.is_set():
        self.start = time.monotonic()
        print(f'=== {self.path.stem}: started', flush=True)
        self.started.set()
        continue
      print(f'[{self.path.stem}] {line}', end='', flush=True)
    self.output.close()

  def wait(self, timeout_s: float) -> Result:
    """Waits until the child exits, killing it `timeout_s` after its start.

    Args:
      timeout_s: Seconds the example may run once it has a job slot.

    Returns:
      How it ended.
    """
    reader = threading.Thread(target=self.stream, daemon=True)
    reader.start()
    status = None
    while True:
      pid, wait_status = os.waitpid(self.pid, os.WNOHANG)
      if pid:
        break
      if (self.started.is_set()
          and time.monotonic() - self.start > timeout_s):
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)
        os.write(self.slots[1], b'.')  # The slot the child held.
        status = f'TIMEOUT ({timeout_s:g} s)'
        break
      time.sleep(_POLL_S)
    reader.join(timeout=5)
    if not self.started.is_set():
      self.start = time.monotonic()
    if status is None:
      returncode = os.waitstatus_to_exitcode(wait_status)
      if returncode == 0:
        status = 'ok'
      elif returncode == MISMATCH_EXIT_CODE:
        status = 'MISMATCH'
      elif returncode == SKIPPED_EXIT_CODE:
        status = 'skipped'
      else:
        status = f'ERROR (exit code {returncode})'
    seconds = time.monotonic() - self.start
    print(f'=== {self.path.stem}: {status} ({seconds:.1f} s)', flush=True)
    return Result(self.path.stem, feature_of(self.path), status, seconds)


def run_examples(examples: list[pathlib.Path], jobs: int,
                 timeout_s: float) -> list[Result]:
  """Runs the examples, at most `jobs` at once; returns how each ended.

  Args:
    examples: The examples' files.
    jobs: How many may run at once.
    timeout_s: Seconds each may run before it is killed and failed.

  Returns:
    The results, in the order of `examples`.
  """
  _preload()
  slots = os.pipe()
  os.write(slots[1], b'.' * jobs)
  # Fork every child before this process starts a thread.
  children = [_Child(path, slots) for path in examples]
  results: list[Result | None] = [None] * len(children)

  def wait(i):
    results[i] = children[i].wait(timeout_s)

  waiters = [threading.Thread(target=wait, args=(i,))
             for i in range(len(children))]
  for w in waiters:
    w.start()
  for w in waiters:
    w.join()
  os.close(slots[0])
  os.close(slots[1])
  return results


def summary(results: list[Result], seconds: float) -> str:
  """Returns the closing summary: a line per example, then the totals.

  Args:
    results: How each example ended, in order.
    seconds: Wall time of the whole run.

  Returns:
    Text ending in `examples: N ok, N mismatched, N failed (total S s)`, with
    `, N skipped` after `failed` if some were skipped.
  """
  name_w = max((len(r.name) for r in results), default=0)
  status_w = max((len(r.status) for r in results), default=0)
  lines = ['summary (feature shown, result, wall time):']
  for r in results:
    lines.append(f'  {r.name:<{name_w}}  {r.status:<{status_w}}  '
                 f'{r.seconds:5.1f} s  {r.feature}')
  mismatched = sum(r.status == 'MISMATCH' for r in results)
  skipped = sum(r.status == 'skipped' for r in results)
  failed = sum(not r.ok for r in results) - mismatched - skipped
  skipped_text = f', {skipped} skipped' if skipped else ''
  lines.append(f'examples: {sum(r.ok for r in results)} ok, {mismatched} '
               f'mismatched, {failed} failed{skipped_text} (total '
               f'{seconds:.1f} s)')
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
  results = run_examples(examples, args.jobs or max(1, len(examples)),
                         args.timeout)
  print(summary(results, time.monotonic() - start), flush=True)
  return 0 if results and all(
      r.ok or r.status == 'skipped' for r in results) else 1


if __name__ == '__main__':
  sys.exit(main())
