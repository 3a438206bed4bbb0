"""Helpers shared by the workloads: flags, timing and the JSON result line.

A workload is a script run by `benchmarks/run.py` in a subprocess, with one
interpreter (stock or patched jax). It prints exactly one line starting with
`RESULT_PREFIX` followed by a JSON object of measurements; anything else it
prints (jax warnings, say) is ignored by the driver.
"""

import argparse
from collections.abc import Callable, Sequence
import json
import sys
import threading
import time
from typing import Any

RESULT_PREFIX = 'BENCH_RESULT '


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
  """Parses the flags every workload accepts.

  Args:
    argv: The arguments (default: `sys.argv[1:]`).

  Returns:
    The namespace with `repeats` (timed calls per function) and `size`
    (`'quick'` or `'default'`, for workloads that scale a loop).
  """
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument('--repeats', type=int, default=5,
                      help='timed calls per function, after the warm-up')
  parser.add_argument('--size', choices=('quick', 'default'),
                      default='default', help='problem size')
  return parser.parse_args(argv)


def time_interleaved(
    fns: dict[str, Callable[[], Any]], repeats: int, warmup: int = 1
) -> dict[str, dict[str, list[float]]]:
  """Times functions round-robin, so that drift affects all of them alike.

  Args:
    fns: Name to a function of no arguments that blocks until done.
    repeats: Timed calls of each function.
    warmup: Untimed calls of each function first (compilation).

  Returns:
    `{'wall': {name: [seconds, ...]}, 'cpu': {name: [seconds, ...]}}`, one
    entry per timed call: wall time, and CPU time of the whole process (all
    threads, `time.process_time`). On a machine shared with other jobs the
    CPU time is the steadier measure of the work a call does.
  """
  for fn in fns.values():
    for _ in range(warmup):
      fn()
  wall = {name: [] for name in fns}
  cpu = {name: [] for name in fns}
  for _ in range(repeats):
    for name, fn in fns.items():
      start_cpu, start = time.process_time(), time.perf_counter()
      fn()
      wall[name].append(time.perf_counter() - start)
      cpu[name].append(time.process_time() - start_cpu)
  return {'wall': wall, 'cpu': cpu}


_callbacks_lock = threading.Lock()
_callbacks_run = [0]


def callback_runners() -> list[tuple[object, str]]:
  """The functions that run the interpreter's callbacks, as (module, name).

  jax's `io_callback_impl` runs every io_callback; the series' patch that
  passes NumPy arrays to the interpreter's callbacks runs them in
  `interpret_utils.interpret_callback_impl` instead. Only the functions that
  the installed jax has are listed.
  """
  from jax._src import callback  # pylint: disable=g-import-not-at-top
  from jax._src.pallas.mosaic.interpret import utils  # pylint: disable=g-import-not-at-top
  return [(module, name)
          for module, name in ((callback, 'io_callback_impl'),
                               (utils, 'interpret_callback_impl'))
          if hasattr(module, name)]


def _install_callback_counter() -> None:
  """Wraps the functions that run every callback (`callback_runners`)."""
  for module, name in callback_runners():
    impl = getattr(module, name)
    if getattr(impl, 'counting', False):
      continue

    def counting_impl(*args, impl=impl, **kwargs):
      with _callbacks_lock:
        _callbacks_run[0] += 1
      return impl(*args, **kwargs)

    counting_impl.counting = True
    setattr(module, name, counting_impl)


def count_callbacks(fns: dict[str, Callable[[], Any]]) -> dict[str, int]:
  """Counts the io_callbacks one call of each function runs (all threads).

  The TPU interpreter runs every simulated memory access, DMA and semaphore
  operation as an io_callback, so this counts interpreter steps exactly,
  whatever the load on the machine.

  Args:
    fns: Name to a function of no arguments that blocks until done (already
      compiled: compilation runs no callbacks, but tracing may).

  Returns:
    Name to the number of io_callbacks one call ran.
  """
  _install_callback_counter()
  counts = {}
  for name, fn in fns.items():
    with _callbacks_lock:
      _callbacks_run[0] = 0
    fn()
    with _callbacks_lock:
      counts[name] = _callbacks_run[0]
  return counts


def emit(result: dict[str, Any]) -> None:
  """Prints the result line that the driver parses."""
  print(RESULT_PREFIX + json.dumps(result, sort_keys=True), flush=True)
  sys.stdout.flush()
