"""Per-step cost of TPU interpret mode, for the speed figure (issue #24).

Runs on stock and on patched jax alike. Five kernels, each under the TPU
interpreter (`interpret=pltpu.InterpretParams(...)`) and, where it runs,
under the discharge interpreter (`interpret=True`):

- `elementwise`: `x * 2 + 1` over a 1-D grid of (8, 128) f32 blocks.
- `matmul`: a blocked matmul over a 3-D grid of (128, 128) f32 blocks with
  a VMEM accumulator.
- `elementwise_races`: `elementwise` with `detect_races=True` (the discharge
  interpreter has no race detection: its figure is the plain kernel's).
- `core_map`: a 2-core `pl.kernel` whose cores copy a block in with a DMA,
  add 1 to it and ping-pong on semaphores each round, and copy it out.
- `ring`: a 4-device ring (`shard_map`) that forwards (8, 128) blocks with
  remote DMAs after a neighbour barrier.

Every result is checked against numpy (and, with race detection, that no
race was reported) before anything is timed: a kernel that computes the
wrong thing raises, and the workload prints no result.

A step is a grid point (`elementwise`, `matmul`), a round of all cores
(`core_map`) or a forwarding step of the ring (`ring`).

Prints `{"wall": {name: [seconds, ...]}, "cpu": {...}, "callbacks": {name:
count}, "steps": {kernel: steps}, "discharge_error": {kernel: message}}`,
where a name is `<kernel>` (TPU interpreter) or `<kernel>/discharge`.

With `--profile`, counts instead the io_callbacks that `--repeats` calls of
each of `--kernels` run, by the interpreter function each runs, and the CPU
time spent in them (see `profile_callbacks`), and the CPU time of a bare
io_callback (`bare_callbacks`), and prints `{"profile": {kernel: ...},
"steps": ..., "calls": ..., "bare_callbacks": {name: seconds}}`.
"""

import argparse
import collections
from collections.abc import Callable
import dataclasses
import functools
import threading
import time

import jax

NUM_DEVICES = 4
# Simulate NUM_DEVICES CPU devices; must happen before jax's first use.
jax.config.update('jax_num_cpu_devices', NUM_DEVICES)

# pylint: disable=g-import-not-at-top
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
import jax.numpy as jnp
import numpy as np

import _common
import _ring
# pylint: enable=g-import-not-at-top

P = jax.sharding.PartitionSpec

# Problem sizes: the number of steps of each kernel. Per-step costs do not
# depend on them much; `quick` keeps the whole run short.
SIZES = {
    'quick': dict(elementwise=16, matmul=2, core_map=4),
    'default': dict(elementwise=64, matmul=4, core_map=16),
}


@dataclasses.dataclass
class Kernel:
  """One benchmark kernel.

  Attributes:
    make: `make(interpret)` returns a function of no arguments that returns
      the kernel's output; `interpret` is the `interpret=` argument of the
      Pallas call.
    expected: The output, computed with numpy.
    steps: The kernel's steps per call (see the module docstring).
    params: The TPU interpreter's parameters.
    discharge: Whether the kernel is also run with `interpret=True`.
  """
  make: Callable[[object], Callable[[], object]]
  expected: np.ndarray
  steps: int
  params: dict = dataclasses.field(default_factory=dict)
  discharge: bool = True


def elementwise(size: str) -> Kernel:
  """`x * 2 + 1` over a grid of (8, 128) f32 blocks."""
  steps = SIZES[size]['elementwise']
  rows, cols = 8, 128

  def kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0 + 1.0

  x = jax.random.normal(jax.random.key(0), (steps * rows, cols), jnp.float32)

  def make(interpret):
    f = jax.jit(pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, jnp.float32),
        grid=(steps,),
        in_specs=[pl.BlockSpec((rows, cols), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((rows, cols), lambda i: (i, 0)),
        interpret=interpret,
    ))
    return lambda: f(x)

  return Kernel(make, np.asarray(x) * 2 + 1, steps)


def matmul(size: str) -> Kernel:
  """A (128 n)^2 @ (128 n)^2 matmul in (128, 128) blocks: an n^3 grid."""
  n = SIZES[size]['matmul']
  block = 128

  def kernel(x_ref, y_ref, o_ref, acc_ref):
    @pl.when(pl.program_id(2) == 0)
    def _():
      acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(x_ref[...], y_ref[...],
                            preferred_element_type=jnp.float32)

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _():
      o_ref[...] = acc_ref[...]

  kx, ky = jax.random.split(jax.random.key(1))
  x = jax.random.normal(kx, (n * block, n * block), jnp.float32)
  y = jax.random.normal(ky, (n * block, n * block), jnp.float32)

  def make(interpret):
    f = jax.jit(pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, jnp.float32),
        grid=(n, n, n),
        in_specs=[pl.BlockSpec((block, block), lambda i, j, k: (i, k)),
                  pl.BlockSpec((block, block), lambda i, j, k: (k, j))],
        out_specs=pl.BlockSpec((block, block), lambda i, j, k: (i, j)),
        scratch_shapes=[pltpu.VMEM((block, block), jnp.float32)],
        interpret=interpret,
    ))
    return lambda: f(x, y)

  expected = np.asarray(x, np.float64) @ np.asarray(y, np.float64)
  return Kernel(make, expected, n ** 3)


def elementwise_races(size: str) -> Kernel:
  """`elementwise` with race detection."""
  k = elementwise(size)
  # interpret=True has no race detection: the figure compares with the
  # plain kernel's discharge run.
  return dataclasses.replace(k, params=dict(detect_races=True),
                             discharge=False)


def core_map(size: str) -> Kernel:
  """2 cores: DMA in, then per round add 1 and ping-pong; DMA out."""
  num_cores, rows, cols = 2, 8, 128
  rounds = SIZES[size]['core_map']
  x = jax.random.normal(jax.random.key(2), (num_cores * rows, cols),
                        jnp.float32)

  def make(interpret):
    mesh = pltpu.TensorCoreMesh(axis_name='core', num_cores=num_cores)

    @pl.kernel(
        out_type=jax.ShapeDtypeStruct(x.shape, jnp.float32),
        mesh=mesh,
        scratch_types=[pltpu.VMEM((rows, cols), jnp.float32),
                       pltpu.SemaphoreType.REGULAR,
                       pltpu.SemaphoreType.DMA],
        interpret=interpret,
    )
    def kernel(x_hbm, o_hbm, buf, sem, dma_sem):
      core = lax.axis_index('core')
      block = pl.ds(pl.multiple_of(core * rows, rows), rows)
      copy_in = pltpu.make_async_copy(x_hbm.at[block], buf, dma_sem)
      copy_in.start()
      copy_in.wait()

      def step(i, carry):
        buf[...] = buf[...] + 1.0
        pl.semaphore_signal(sem, 1, core_index=1 - core)
        pl.semaphore_wait(sem, 1)
        return carry

      lax.fori_loop(0, rounds, step, None)
      copy_out = pltpu.make_async_copy(buf, o_hbm.at[block], dma_sem)
      copy_out.start()
      copy_out.wait()

    f = jax.jit(kernel)
    return lambda: f(x)

  return Kernel(make, np.asarray(x) + rounds, rounds)


def ring(size: str) -> Kernel:
  """4 devices: barrier with both neighbours, then a ring all-gather."""
  del size  # A ring of NUM_DEVICES has NUM_DEVICES - 1 forwarding steps.
  rows, cols = 8, 128

  mesh = jax.make_mesh((NUM_DEVICES,), ('x',),
                       devices=jax.devices()[:NUM_DEVICES])
  x = jax.random.uniform(jax.random.key(3), (NUM_DEVICES * rows, cols))
  x = jax.device_put(x, jax.sharding.NamedSharding(mesh, P('x')))

  def make(interpret):
    gather = _ring.all_gather(NUM_DEVICES, rows, cols, interpret)
    f = jax.jit(jax.shard_map(
        lambda b: gather(b).reshape(NUM_DEVICES * rows, cols), mesh=mesh,
        in_specs=P('x'), out_specs=P('x'), check_vma=False))
    return lambda: f(x)

  return Kernel(make, np.tile(np.asarray(x), (NUM_DEVICES, 1)),
                NUM_DEVICES - 1)


KERNELS = {
    'elementwise': elementwise,
    'matmul': matmul,
    'elementwise_races': elementwise_races,
    'core_map': core_map,
    'ring': ring,
}


def _races_found() -> bool:
  from jax._src.pallas.mosaic.interpret import interpret_pallas_call  # pylint: disable=g-import-not-at-top
  races = interpret_pallas_call.races
  return races is not None and races.races_found


def _checked(name: str, kernel: Kernel, interpret) -> Callable[[], object]:
  """The kernel's call, after checking one call's output against numpy.

  Raises:
    AssertionError: The output differs from `kernel.expected`, or the race
      detector reported a race.
  """
  call = kernel.make(interpret)
  out = np.asarray(jax.block_until_ready(call()))
  np.testing.assert_allclose(out, kernel.expected, rtol=1e-4, atol=1e-3,
                             err_msg=f'{name}: wrong result')
  if kernel.params.get('detect_races'):
    assert not _races_found(), f'{name}: the race detector reported a race'
  return lambda: jax.block_until_ready(call())


def _callback_name(flat_callback) -> str:
  """The interpreter function an io_callback runs, e.g. `get[input_name]`.

  The names of the keywords that `functools.partial` binds are kept: they
  tell the interpreter's call sites of one function apart (`get[source_info]`
  is a kernel's load, `get[input_name]` a block copy's read of the input).
  """
  fn = getattr(flat_callback, 'callback_func', flat_callback)
  keywords = []
  while isinstance(fn, functools.partial):
    keywords += fn.keywords
    fn = fn.func
  name = getattr(fn, '__name__', type(fn).__name__)
  return f'{name}[{",".join(sorted(keywords))}]' if keywords else name


_profile_lock = threading.Lock()
# Callback name -> [calls, CPU seconds of io_callback_impl, of the
# interpreter's function inside it, of `device_put` inside it].
_profile = collections.defaultdict(lambda: [0, 0.0, 0.0, 0.0])
_in_callback = threading.local()


def _add_thread_time(slot: int, fn, *args, **kwargs):
  """Calls `fn`, adding its thread CPU time to `_in_callback.times[slot]`."""
  start = time.thread_time()
  try:
    return fn(*args, **kwargs)
  finally:
    times = getattr(_in_callback, 'times', None)
    if times is not None:
      times[slot] += time.thread_time() - start


def _install_profiler() -> None:
  """Wraps the functions that run the interpreter's callbacks.

  Those are `_common.callback_runners()`: jax's `io_callback_impl` and the
  series' `interpret_callback_impl`. Per call, it records the callback's
  name and three CPU times of the thread that runs it (`time.thread_time`):
  of the wrapped function as a whole, of the interpreter's function alone,
  and of `jax.device_put` of the arguments inside it (none in
  `interpret_callback_impl`; the rest is `np.asarray` of the results and,
  where they are entered, the context managers). What XLA spends to leave and
  re-enter compiled code around a callback is in none of them: it is the
  call's CPU time less the sum of the first.
  """
  from jax._src import api  # pylint: disable=g-import-not-at-top
  device_put = api.device_put
  timed_callbacks = {}  # id(_FlatCallback) -> (it, its timed copy).

  def timed_device_put(*args, **kwargs):
    return _add_thread_time(2, device_put, *args, **kwargs)

  def timed(flat_callback):
    entry = timed_callbacks.get(id(flat_callback))
    if entry is None or entry[0] is not flat_callback:
      func = flat_callback.callback_func
      entry = (flat_callback, dataclasses.replace(
          flat_callback,
          callback_func=functools.partial(_add_thread_time, 1, func)))
      timed_callbacks[id(flat_callback)] = entry
    return entry[1]

  def profiling(impl):
    return lambda *args, **kwargs: profiling_impl(impl, *args, **kwargs)

  def profiling_impl(impl, *args, callback, **kwargs):  # pylint: disable=redefined-outer-name
    name = _callback_name(callback)
    _in_callback.times = times = [0.0, 0.0, 0.0]
    try:
      return _add_thread_time(0, impl, *args, callback=timed(callback),
                              **kwargs)
    finally:
      _in_callback.times = None
      with _profile_lock:
        entry = _profile[name]
        entry[0] += 1
        for i, t in enumerate(times):
          entry[1 + i] += t

  api.device_put = timed_device_put
  for module, name in _common.callback_runners():
    setattr(module, name, profiling(getattr(module, name)))


def profile_callbacks(fns: dict[str, Callable[[], object]],
                      calls: int) -> dict[str, dict]:
  """Counts and times the io_callbacks of `calls` calls of each function.

  Each function's calls are timed first without the profiler installed, then
  with it, so that the profiler's own cost shows.

  Returns:
    `{name: {'callbacks': {callback: [calls, impl CPU s, function CPU s,
    device_put CPU s]}, 'cpu': process CPU s, 'cpu_bare': the same without
    the profiler}}`, totals over the `calls` calls.
  """
  bare = {}
  for name, fn in fns.items():
    fn()  # Compiled already; one more call so that caches are warm.
    start = time.process_time()
    for _ in range(calls):
      fn()
    bare[name] = time.process_time() - start
  _install_profiler()
  profiles = {}
  for name, fn in fns.items():
    fn()
    with _profile_lock:
      _profile.clear()
    start = time.process_time()
    for _ in range(calls):
      fn()
    cpu = time.process_time() - start
    with _profile_lock:
      profiles[name] = {'callbacks': {k: list(v) for k, v in _profile.items()},
                        'cpu': cpu, 'cpu_bare': bare[name]}
  return profiles


def bare_callbacks(args: int, n: int = 200) -> Callable[[], object]:
  """A jitted loop of `n` io_callbacks of a no-op, each given `args` scalars.

  The floor of the interpreter's per-callback cost: the interpreter's
  callbacks take a token and ids (device, core, memory space, buffer) and
  indices, all int32 scalars or small arrays.
  """
  from jax.experimental import io_callback  # pylint: disable=g-import-not-at-top

  def noop(*xs):
    return xs[0]

  def body(i, token):
    return io_callback(noop, jax.ShapeDtypeStruct((), jnp.int32), token,
                       *([i] * (args - 1)), ordered=False)

  f = jax.jit(lambda: lax.fori_loop(0, n, body, jnp.int32(0)))
  jax.block_until_ready(f())
  return lambda: jax.block_until_ready(f())


def main():
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument('--repeats', type=int, default=5)
  parser.add_argument('--size', choices=tuple(SIZES), default='default')
  parser.add_argument('--kernels', default=','.join(KERNELS))
  parser.add_argument('--profile', action='store_true')
  args = parser.parse_args()
  names = args.kernels.split(',')
  kernels = {name: KERNELS[name](args.size) for name in names}
  fns, discharge_error = {}, {}
  for name, kernel in kernels.items():
    fns[name] = _checked(
        name, kernel, pltpu.InterpretParams(**kernel.params))
    if args.profile or not kernel.discharge:
      continue
    try:
      fns[f'{name}/discharge'] = _checked(name, kernel, True)
    except AssertionError:
      raise
    except Exception as e:  # pylint: disable=broad-exception-caught
      # The discharge interpreter does not run this kernel: say why.
      message = str(e).strip().splitlines()
      discharge_error[name] = (f'{type(e).__name__}: '
                               f'{message[0] if message else ""}')[:200]
      pltpu.reset_tpu_interpret_mode_state()
  steps = {name: kernel.steps for name, kernel in kernels.items()}
  if args.profile:
    floor = {f'bare_{n}': bare_callbacks(n) for n in (1, 8)}
    timings = _common.time_interleaved(floor, args.repeats)
    _common.emit({'profile': profile_callbacks(fns, args.repeats),
                  'calls': args.repeats, 'steps': steps,
                  'bare_callbacks': {name: min(t) / 200
                                     for name, t in timings['cpu'].items()}})
    return
  timings = _common.time_interleaved(fns, args.repeats, warmup=0)
  _common.emit({**timings, 'callbacks': _common.count_callbacks(fns),
                'steps': steps, 'discharge_error': discharge_error})


if __name__ == '__main__':
  main()
