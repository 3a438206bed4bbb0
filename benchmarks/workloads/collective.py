"""A table shared by 4 cores: collective scratch against private copies.

Needs patched jax. Every kernel scores the rows of `x` against every row of
a table (`x @ table.T`) on a 4-core `pltpu.TensorCoreMesh`, so every core
needs the whole table. Two scenarios, each with a private and a collective
kernel:

`copy`: the table is already in HBM.
- `private_copy`: the table is private scratch (`scratch_types`); every core
  copies the whole table from HBM into its own VMEM. No synchronization.
- `collective_copy`: `pl.run_scoped(..., collective_axes='core')` allocates
  one VMEM table for all cores; each core copies a quarter of it from HBM
  and signals, all wait (non-decrementing) for the 4 signals, and core 0
  drains the counts at the end, as in `examples/collective_scope_cores.py`.

`computed`: the cores compute the table together (each L2-normalizes a
quarter of the codebook), so they must share what they computed.
- `private_computed`: each core writes its quarter to an HBM staging buffer,
  signals every core, waits for 4 signals and copies the whole table from
  HBM into its own VMEM scratch.
- `collective_computed`: each core writes its quarter straight into the
  collective table; then as `collective_copy`.

Allocations are counted by counting the `Buffer` objects the interpreter
creates (see `_count_allocations`), and checked against the number of table
buffers live at the barrier, read inside the collective kernels by an
io_callback after every core has passed its non-decrementing wait.

Prints `{"wall": {...}, "cpu": {...}, "allocations": {kernel:
{memory_space: [count, bytes]}}, "table_bytes": ...}`, where the memory
space `vmem_table` counts the VMEM buffers of the table's shape.
"""

import collections
import functools
import threading

import jax
from jax import lax
from jax._src.pallas.mosaic.interpret import interpret_pallas_call
from jax._src.pallas.mosaic.interpret import shared_memory as shared_memory_lib
from jax.experimental import io_callback
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
import jax.numpy as jnp
import numpy as np

import _common

NUM_CORES = 4
CODES = 512
COLS = 128
ROWS_PER_CORE = 16
CODES_PER_CORE = CODES // NUM_CORES

_lock = threading.Lock()
_new_buffers = []  # (memory space, Buffer) of every buffer created.
_allocating = threading.local()  # The key that allocate_buffer is making.


def _count_allocations():
  """Records every buffer that the interpreter creates.

  `SharedMemory.allocate_buffer(key, ...)` creates a `Buffer` only if no
  buffer with `key` exists (a core that finds the collective buffer already
  allocated creates nothing), so counting constructions of `Buffer` counts
  allocations; the wrapped `allocate_buffer` tells which memory space each is
  in. (Counting buffer ids instead misses buffers whose ids Python reused.)
  """
  allocate = shared_memory_lib.SharedMemory.allocate_buffer
  init = shared_memory_lib.Buffer.__init__

  def allocate_buffer(self, key, *args, **kwargs):
    _allocating.key = key
    try:
      allocate(self, key, *args, **kwargs)
    finally:
      _allocating.key = None

  def counting_init(self, *args, **kwargs):
    init(self, *args, **kwargs)
    key = getattr(_allocating, 'key', None)
    with _lock:
      _new_buffers.append((None if key is None else key[0], self))

  shared_memory_lib.SharedMemory.allocate_buffer = allocate_buffer
  shared_memory_lib.Buffer.__init__ = counting_init


def _out_specs(extra_outputs=()):
  return dict(
      out_type=(jax.ShapeDtypeStruct((NUM_CORES * ROWS_PER_CORE, CODES),
                                     jnp.float32), *extra_outputs),
      mesh=pltpu.TensorCoreMesh(axis_name='core', num_cores=NUM_CORES),
      interpret=pltpu.InterpretParams(
          allow_non_decrementing_semaphore_wait=True,
          allow_collective_axes_in_run_scoped=True,
      ),
  )


def _rows(core, n):
  return pl.ds(pl.multiple_of(core * n, n), n)


def _normalize(codes):
  return codes * lax.rsqrt(jnp.sum(codes * codes, axis=1, keepdims=True))


def _score(x_hbm, o_hbm, x_rows, table, scores, core):
  pltpu.sync_copy(x_hbm.at[_rows(core, ROWS_PER_CORE)], x_rows)
  scores[...] = lax.dot_general(
      x_rows[...], table[...], (((1,), (1,)), ((), ())),
      preferred_element_type=jnp.float32)
  pltpu.sync_copy(scores, o_hbm.at[_rows(core, ROWS_PER_CORE)])


_PRIVATE_SCRATCH = [pltpu.VMEM((CODES, COLS), jnp.float32),
                    pltpu.VMEM((ROWS_PER_CORE, COLS), jnp.float32),
                    pltpu.VMEM((ROWS_PER_CORE, CODES), jnp.float32)]
_COLLECTIVE_SCRATCH = _PRIVATE_SCRATCH[1:]


@pl.kernel(scratch_types=_PRIVATE_SCRATCH, **_out_specs())
def private_copy(x_hbm, table_hbm, o_hbm, table, x_rows, scores):
  """Every core copies the whole table into its own scratch."""
  core = lax.axis_index('core')
  pltpu.sync_copy(table_hbm, table)
  _score(x_hbm, o_hbm, x_rows, table, scores, core)


_live_tables = []  # Table buffers live at the barrier, one entry per core.


def _record_live_tables(count):
  """io_callback: counts the table-shaped VMEM buffers in the interpreter."""
  del count  # Only orders the callback after the barrier.
  mem = interpret_pallas_call._shared_memory.mem  # pylint: disable=protected-access
  live = sum(1 for key, buffer in list(mem.items())
             if key[0] == 'vmem' and getattr(buffer, 'shape', None)
             == (CODES, COLS))
  with _lock:
    _live_tables.append(live)


def _probe(ready, probe):
  """With `probe`, records the live table buffers once `ready` is read."""
  if probe:
    io_callback(_record_live_tables, None, pl.semaphore_read(ready))


def _private_computed(probe=False):
  """Every core publishes its quarter through HBM, then copies the table."""

  @pl.kernel(
      scratch_types=[*_PRIVATE_SCRATCH,
                     pltpu.VMEM((CODES_PER_CORE, COLS), jnp.float32),
                     pltpu.SemaphoreType.REGULAR],
      **_out_specs([jax.ShapeDtypeStruct((CODES, COLS), jnp.float32)]),
  )
  def kernel(x_hbm, codebook_hbm, o_hbm, staging_hbm, table, x_rows, scores,
             codes, ready):
    core = lax.axis_index('core')
    quarter = _rows(core, CODES_PER_CORE)
    pltpu.sync_copy(codebook_hbm.at[quarter], codes)
    codes[...] = _normalize(codes[...])
    pltpu.sync_copy(codes, staging_hbm.at[quarter])
    for c in range(NUM_CORES):
      pl.semaphore_signal(ready, 1, core_index=c)
    pl.semaphore_wait(ready, NUM_CORES)
    _probe(ready, probe)
    pltpu.sync_copy(staging_hbm, table)
    _score(x_hbm, o_hbm, x_rows, table, scores, core)

  return kernel


def _collective(fill_quarter, probe=False):
  """A collective-table kernel; `fill_quarter(src, table, quarter)`."""

  @pl.kernel(scratch_types=_COLLECTIVE_SCRATCH, **_out_specs())
  def kernel(x_hbm, src_hbm, o_hbm, x_rows, scores):
    core = lax.axis_index('core')

    def body(table, ready, done):
      fill_quarter(src_hbm, table, _rows(core, CODES_PER_CORE))
      pl.semaphore_signal(ready, 1)
      pl.semaphore_wait(ready, NUM_CORES, decrement=False)
      _probe(ready, probe)
      _score(x_hbm, o_hbm, x_rows, table, scores, core)
      pl.semaphore_signal(done, 1)

      @pl.when(core == 0)
      def _():
        pl.semaphore_wait(done, NUM_CORES)
        pl.semaphore_wait(ready, NUM_CORES)

    pl.run_scoped(body, pltpu.VMEM((CODES, COLS), jnp.float32),
                  pltpu.SemaphoreType.REGULAR, pltpu.SemaphoreType.REGULAR,
                  collective_axes='core')

  return kernel


def _copy_quarter(table_hbm, table, quarter):
  pltpu.sync_copy(table_hbm.at[quarter], table.at[quarter])


def _compute_quarter(codebook_hbm, table, quarter):
  pltpu.sync_copy(codebook_hbm.at[quarter], table.at[quarter])
  table[quarter, :] = _normalize(table[quarter, :])


# Name -> (kernel factory(probe), whether the table is computed, the table
# buffers live at the barrier: one shared by the 4 cores, or one per core;
# None: the kernel has no barrier).
KERNELS = {
    'private_copy': (lambda probe=False: private_copy, False, None),
    'collective_copy': (functools.partial(_collective, _copy_quarter), False,
                        1),
    'private_computed': (_private_computed, True, NUM_CORES),
    'collective_computed': (functools.partial(_collective, _compute_quarter),
                            True, 1),
}


def main():
  args = _common.parse_args()
  _count_allocations()
  kx, kt = jax.random.split(jax.random.key(0))
  x = jax.random.normal(kx, (NUM_CORES * ROWS_PER_CORE, COLS), jnp.float32)
  table = jax.random.normal(kt, (CODES, COLS), jnp.float32)
  normalized = table / jnp.linalg.norm(table, axis=1, keepdims=True)
  fns, allocations, live_at_barrier = {}, {}, {}
  for name, (make, computed, _) in KERNELS.items():
    expected = np.asarray(x) @ np.asarray(normalized if computed else table).T
    # One counted call of the kernel with the probe, after compilation.
    probed = jax.jit(make(probe=True))
    jax.block_until_ready(probed(x, table))
    del _new_buffers[:], _live_tables[:]
    out = jax.tree.leaves(jax.block_until_ready(probed(x, table)))[0]
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-3)
    by_space = collections.defaultdict(lambda: [0, 0])
    for space, buffer in _new_buffers:
      by_space[space][0] += 1
      by_space[space][1] += buffer.size
      if space == 'vmem' and buffer.shape == (CODES, COLS):
        by_space['vmem_table'][0] += 1
        by_space['vmem_table'][1] += buffer.size
    allocations[name] = dict(by_space)
    live_at_barrier[name] = list(_live_tables)
    # The timed kernel has no probe.
    f = jax.jit(make())
    call = lambda f=f: jax.tree.leaves(f(x, table))[0]
    np.testing.assert_allclose(call(), expected, rtol=1e-4, atol=1e-3)
    fns[name] = lambda call=call: jax.block_until_ready(call())
  timings = _common.time_interleaved(fns, args.repeats)
  _common.emit({
      **timings,
      'callbacks': _common.count_callbacks(fns),
      'allocations': allocations,
      'live_at_barrier': live_at_barrier,
      'expected_live': {name: live for name, (_, _, live) in KERNELS.items()},
      'table_bytes': CODES * COLS * 4,
  })


if __name__ == '__main__':
  main()
