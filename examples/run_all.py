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
sets its own number of simulated CPU devices before importing jax. Their
output is streamed as it comes. An example fails if it exits non-zero (a
mismatch or an error) or runs longer than the timeout, so a kernel that hangs
fails instead of hanging the run.

Usage::

  python examples/run_all.py [--timeout SECONDS] [NAME ...]

Exits 0 if every example matched, 1 otherwise.
"""

import argparse
import os
import pathlib
import subprocess
import sys
import threading
import time

EXAMPLES_DIR = pathlib.Path(__file__).resolve().parent
DEFAULT_TIMEOUT_S = 300.0


def find_examples() -> list[pathlib.Path]:
  """Returns the example modules, excluding this file and `_`-prefixed ones."""
  this = pathlib.Path(__file__).resolve()
  return sorted(
      p for p in EXAMPLES_DIR.glob('*.py')
      if p.resolve() != this and not p.name.startswith('_')
  )


def run_example(path: pathlib.Path, timeout_s: float) -> tuple[bool, str]:
  """Runs one example, streaming its output with a prefix.

  Args:
    path: The example's file.
    timeout_s: Seconds after which the example is killed and failed.

  Returns:
    (ok, status): whether it passed, and a word or two on how it ended.
  """
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
    return False, f'timed out after {timeout_s:g} s'
  reader.join()
  if returncode == 0:
    return True, 'ok'
  return False, f'failed (exit code {returncode})'


def main(argv: list[str] | None = None) -> int:
  """Runs the examples named in `argv` (default: all); returns the exit code."""
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument(
      '--timeout', type=float, default=DEFAULT_TIMEOUT_S,
      help='seconds each example may run (default: %(default)s)',
  )
  parser.add_argument(
      'names', nargs='*', help='examples to run (default: all)'
  )
  args = parser.parse_args(argv)

  examples = find_examples()
  if args.names:
    unknown = set(args.names) - {p.stem for p in examples}
    if unknown:
      parser.error(f'unknown examples: {", ".join(sorted(unknown))}')
    examples = [p for p in examples if p.stem in args.names]

  results = []
  for path in examples:
    print(f'=== {path.name}', flush=True)
    start = time.monotonic()
    ok, status = run_example(path, args.timeout)
    elapsed = time.monotonic() - start
    print(f'=== {path.name}: {status} ({elapsed:.1f} s)', flush=True)
    results.append((path.stem, ok, status))

  num_ok = sum(ok for _, ok, _ in results)
  failed = [f'{name}: {status}' for name, ok, status in results if not ok]
  summary = f'examples: {num_ok} ok, {len(failed)} mismatched'
  if failed:
    summary += f' ({"; ".join(failed)})'
  print(summary)
  return 1 if failed or not results else 0


if __name__ == '__main__':
  sys.exit(main())
