"""A core blocked in a wait: its CPU use, and how fast a signal wakes it.

Needs patched jax. Two kernels on a 2-core `pltpu.TensorCoreMesh`; core 1
signals core 0, core 0 waits. Time stamps come from `io_callback`s with
`ordered=False`, placed by data dependencies (the interpreter runs each core
as its own computation, in its own Python thread, so a token cannot order
them against the interpreter's own callbacks):

- a stamp taken *before* a signal returns the signal's increment, so the
  signal cannot start before it;
- a stamp taken *before* a wait returns the awaited value;
- a stamp taken *after* a wait takes the result of a `pl.semaphore_read`
  issued after the wait (and the next wait's value depends on it).

`blocked`: core 1 sleeps `sleep_s` in a callback, then signals; core 0 waits
for it with a non-decrementing (or, for reference, a decrementing) wait.
Process CPU time and wall time are measured around the call, for a long
and a short sleep; `(cpu_long - cpu_short) / (wall_long - wall_short)` is
the CPU the process burns per second of blocking.

`wakeup`: `rounds` times, core 1 sleeps a few ms (so that core 0 is surely
blocked), stamps, signals; core 0 waits non-decrementing for the round's
count and stamps after it. Latency = after-wait stamp - before-signal stamp,
for the rounds where core 0 entered its wait before the signal. The same
stamps around a signal and a wait on a single core that never blocks give
the cost of the measurement itself; stamps taken inside the interpreter
(entering `Semaphore.signal`, leaving `Semaphore.wait`) give the wake-up
without the callbacks.

Prints `{"blocked": {variant: {"cpu_s", "wall_s", ...}}, "wakeup": {...}}`.
"""

import collections
import resource
import time

import jax
from jax import lax
from jax._src.pallas.mosaic.interpret import shared_memory as shared_memory_lib
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
import jax.numpy as jnp
import numpy as np

import _common

ROUNDS = {'quick': 20, 'default': 40}
SLEEP_S = {'quick': 0.5, 'default': 1.0}
SHORT_SLEEP_S = 0.05
WAKEUP_GAP_S = 0.005

# Set by the driver code below, read by the callbacks.
_sleep_s = [0.0]
_stamps = collections.defaultdict(dict)


def _scalar_callback(fn, *args):
  """Calls `fn(*numpy args) -> int` from the kernel; returns an int32."""
  return jax.experimental.io_callback(
      lambda *a: np.int32(fn(*a)), jax.ShapeDtypeStruct((), jnp.int32),
      *args, ordered=False)


def _sleep_then_one():
  time.sleep(_sleep_s[0])
  return 1


def _cpu_s() -> float:
  """CPU time of the whole process (all threads), user + system."""
  usage = resource.getrusage(resource.RUSAGE_SELF)
  return usage.ru_utime + usage.ru_stime


def blocked_kernel(decrement: bool):
  """Core 0 waits on a signal that core 1 sends after sleeping."""
  mesh = pltpu.TensorCoreMesh(axis_name='core', num_cores=2)

  @pl.kernel(
      out_type=jax.ShapeDtypeStruct((2, 8, 128), jnp.int32),
      mesh=mesh,
      scratch_types=[pltpu.VMEM((8, 128), jnp.int32),
                     pltpu.SemaphoreType.REGULAR],
      interpret=pltpu.InterpretParams(
          allow_non_decrementing_semaphore_wait=True,
      ),
  )
  def kernel(o_hbm, buf, sem):
    core = lax.axis_index('core')

    @pl.when(core == 1)
    def _():
      pl.semaphore_signal(sem, _scalar_callback(_sleep_then_one),
                          core_index=0)

    @pl.when(core == 0)
    def _():
      pl.semaphore_wait(sem, 1, decrement=decrement)
      if not decrement:
        pl.semaphore_wait(sem, 1)

    buf[...] = jnp.full((8, 128), core, jnp.int32)
    pltpu.sync_copy(buf, o_hbm.at[core])

  f = jax.jit(kernel)
  return lambda: jax.block_until_ready(f())


def measure_blocked(sleep_s: float, repeats: int) -> dict[str, object]:
  """CPU and wall time around the `blocked` kernel, both wait variants."""
  fns = {'nondecrementing': blocked_kernel(False),
         'decrementing': blocked_kernel(True)}
  _sleep_s[0] = 0.0
  for fn in fns.values():
    fn()  # Compile.
  result = {name: {'cpu_s': [], 'wall_s': [], 'sleep_s': []}
            for name in fns}
  for _ in range(repeats):
    for sleep in (SHORT_SLEEP_S, sleep_s):
      _sleep_s[0] = sleep
      for name, fn in fns.items():
        cpu, wall = _cpu_s(), time.perf_counter()
        fn()
        result[name]['wall_s'].append(time.perf_counter() - wall)
        result[name]['cpu_s'].append(_cpu_s() - cpu)
        result[name]['sleep_s'].append(sleep)
  return result


# (event, semaphore, perf_counter), recorded inside the interpreter while
# `_trace_interpreter[0]` is True.
_trace_interpreter = [False]
_interpreter_stamps = []


def _stamp_interpreter():
  """Wraps `Semaphore.signal` (entry) and `Semaphore.wait` (exit) to stamp.

  This measures the wake-up inside the interpreter, without the cost of the
  callbacks that carry the kernel-level stamps.
  """
  semaphore = shared_memory_lib.Semaphore
  signal, wait = semaphore.signal, semaphore.wait

  def stamped_signal(self, *args, **kwargs):
    if _trace_interpreter[0]:
      _interpreter_stamps.append(('signal', self, time.perf_counter()))
    return signal(self, *args, **kwargs)

  def stamped_wait(self, *args, decrement=True, **kwargs):
    result = wait(self, *args, decrement=decrement, **kwargs)
    if _trace_interpreter[0] and not decrement:
      _interpreter_stamps.append(('wake', self, time.perf_counter()))
    return result

  semaphore.signal, semaphore.wait = stamped_signal, stamped_wait


def _stamp(kind, i, *unused):
  _stamps[kind][int(i)] = time.perf_counter()


def _sleep_stamp(i):
  time.sleep(WAKEUP_GAP_S)
  _stamp('signal', i)
  return 1


def wakeup_kernel(rounds: int):
  """Core 1 signals core 0 `rounds` times; core 0 stamps each wake-up."""
  mesh = pltpu.TensorCoreMesh(axis_name='core', num_cores=2)

  @pl.kernel(
      out_type=jax.ShapeDtypeStruct((2, 8, 128), jnp.int32),
      mesh=mesh,
      scratch_types=[pltpu.VMEM((8, 128), jnp.int32),
                     pltpu.SemaphoreType.REGULAR],
      interpret=pltpu.InterpretParams(
          allow_non_decrementing_semaphore_wait=True,
      ),
  )
  def kernel(o_hbm, buf, sem):
    core = lax.axis_index('core')

    @pl.when(core == 1)
    def _():
      def signal(i, carry):
        pl.semaphore_signal(sem, _scalar_callback(_sleep_stamp, i),
                            core_index=0)
        return carry
      lax.fori_loop(0, rounds, signal, None)

    @pl.when(core == 0)
    def _():
      def wait(i, seen):
        # `seen` (the count read after the previous wait) orders this
        # round's stamps after the previous round's.
        entered = _scalar_callback(
            lambda i, s: _stamp('enter', i) or 1, i, seen)
        pl.semaphore_wait(sem, i + entered, decrement=False)
        seen = pl.semaphore_read(sem)
        return seen + _scalar_callback(
            lambda i, s: _stamp('wake', i) or 0, i, seen)
      lax.fori_loop(0, rounds, wait, jnp.int32(0))
      pl.semaphore_wait(sem, rounds)

    buf[...] = jnp.full((8, 128), core, jnp.int32)
    pltpu.sync_copy(buf, o_hbm.at[core])

  f = jax.jit(kernel)
  return lambda: jax.block_until_ready(f())


def unblocked_kernel(rounds: int):
  """The same stamps, signal, wait and read on one core that never blocks.

  The time between its stamps is what the measurement itself costs (the
  signal, the satisfied wait, the read and the callbacks), without any
  thread having to wake up.
  """
  mesh = pltpu.TensorCoreMesh(axis_name='core', num_cores=1)

  @pl.kernel(
      out_type=jax.ShapeDtypeStruct((1, 8, 128), jnp.int32),
      mesh=mesh,
      scratch_types=[pltpu.VMEM((8, 128), jnp.int32),
                     pltpu.SemaphoreType.REGULAR],
      interpret=pltpu.InterpretParams(
          allow_non_decrementing_semaphore_wait=True,
      ),
  )
  def kernel(o_hbm, buf, sem):
    def round_(i, seen):
      one = _scalar_callback(lambda i, s: _stamp('signal', i) or 1, i, seen)
      pl.semaphore_signal(sem, one)
      pl.semaphore_wait(sem, i + one, decrement=False)
      seen = pl.semaphore_read(sem)
      return seen + _scalar_callback(
          lambda i, s: _stamp('wake', i) or 0, i, seen)
    lax.fori_loop(0, rounds, round_, jnp.int32(0))
    pl.semaphore_wait(sem, rounds)
    buf[...] = jnp.zeros((8, 128), jnp.int32)
    pltpu.sync_copy(buf, o_hbm.at[0])

  f = jax.jit(kernel)
  return lambda: jax.block_until_ready(f())


def measure_wakeup(rounds: int, repeats: int) -> dict[str, object]:
  """Wake-up latencies (seconds) over `repeats` runs of `rounds` rounds.

  Args:
    rounds: Signals per run.
    repeats: Runs, alternating with runs of the unblocked baseline.

  Returns:
    `latency_s`: signal-to-wake-up times of the rounds where core 0 was
    waiting before the signal; `not_blocked`: how many rounds it was not;
    `baseline_s`: the same stamps around a signal and a satisfied wait on
    one core; `interpreter_s`: for the same rounds as `latency_s`, the time
    from entering `Semaphore.signal` to leaving `Semaphore.wait`.
  """
  fn, baseline = wakeup_kernel(rounds), unblocked_kernel(rounds)
  fn()  # Compile.
  baseline()
  latencies, unblocked, baselines, inside = [], 0, [], []
  for _ in range(repeats):
    _stamps.clear()
    del _interpreter_stamps[:]
    _trace_interpreter[0] = True
    fn()
    _trace_interpreter[0] = False
    # Only the signals of the waited-on semaphore (DMAs signal others).
    waited = {id(sem) for kind, sem, _ in _interpreter_stamps
              if kind == 'wake'}
    signals = [t for kind, sem, t in _interpreter_stamps
               if kind == 'signal' and id(sem) in waited]
    wakes = [t for kind, _, t in _interpreter_stamps if kind == 'wake']
    assert len(signals) == len(wakes) == rounds, (len(signals), len(wakes))
    for i in range(rounds):
      if _stamps['enter'][i] < _stamps['signal'][i]:
        latencies.append(_stamps['wake'][i] - _stamps['signal'][i])
        inside.append(wakes[i] - signals[i])
      else:
        unblocked += 1
    _stamps.clear()
    baseline()
    baselines += [_stamps['wake'][i] - _stamps['signal'][i]
                  for i in range(rounds)]
  return {'latency_s': latencies, 'not_blocked': unblocked,
          'baseline_s': baselines, 'interpreter_s': inside}


def main():
  args = _common.parse_args()
  _stamp_interpreter()
  _common.emit({
      'blocked': measure_blocked(SLEEP_S[args.size],
                                 max(1, args.repeats // 2)),
      'wakeup': measure_wakeup(ROUNDS[args.size], args.repeats),
  })


if __name__ == '__main__':
  main()
