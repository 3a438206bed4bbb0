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
  drains the counts at the end, as in `examples/shared_table_collective.py`.

`computed`: the cores compute the table together (each L2-normalizes a
quarter of the codebook), so they must share what they computed.
- `private_computed`: each core writes its quarter to an HBM staging buffer,
  signals every core, waits for 4 signals and copies the whole table from
  HBM into its own VMEM scratch.
- `collective_computed`: each core writes its quarter straight into the
  collective table; then as `collective_copy`.

Allocations are counted by wrapping `SharedMemory.allocate_buffer`: a new
buffer object in the interpreter's memory is one allocation (cores that
find the collective buffer already allocated allocate nothing).

Prints `{"wall": {...}, "cpu": {...}, "allocations": {kernel:
{memory_space: [count, bytes]}}, "table_bytes": ...}`, where the memory
space `vmem_table` counts the VMEM buffers of the table's shape.
"""

import collections
import threading

import jax
from jax import lax
from jax._src.pallas.mosaic.interpret import shared_memory as shared_memory_lib
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
_new_buffers = []  # Strong references, so that ids are never reused.
_seen = set()


def _count_allocations():
  """Wraps `SharedMemory.allocate_buffer` to record every new buffer."""
  allocate = shared_memory_lib.SharedMemory.allocate_buffer

  def counting_allocate_buffer(self, key, *args, **kwargs):
    allocate(self, key, *args, **kwargs)
    with self.lock:
      buffer = self.mem.get(key)
    with _lock:
      if buffer is not None and id(buffer) not in _seen:
        _seen.add(id(buffer))
        _new_buffers.append((key[0], buffer))

  shared_memory_lib.SharedMemory.allocate_buffer = counting_allocate_buffer


def _out_specs(extra_outputs=()):
  return dict(
      out_type=(jax.ShapeDtypeStruct((NUM_CORES * ROWS_PER_CORE, CODES),
                                     jnp.float32), *extra_outputs),
      mesh=pltpu.TensorCoreMesh(axis_name='core', num_cores=NUM_CORES),
      interpret=pltpu.InterpretParams(),
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


@pl.kernel(
    scratch_types=[*_PRIVATE_SCRATCH,
                   pltpu.VMEM((CODES_PER_CORE, COLS), jnp.float32),
                   pltpu.SemaphoreType.REGULAR],
    **_out_specs([jax.ShapeDtypeStruct((CODES, COLS), jnp.float32)]),
)
def private_computed(x_hbm, codebook_hbm, o_hbm, staging_hbm, table, x_rows,
                     scores, codes, ready):
  """Every core publishes its quarter through HBM, then copies the table."""
  core = lax.axis_index('core')
  quarter = _rows(core, CODES_PER_CORE)
  pltpu.sync_copy(codebook_hbm.at[quarter], codes)
  codes[...] = _normalize(codes[...])
  pltpu.sync_copy(codes, staging_hbm.at[quarter])
  for c in range(NUM_CORES):
    pl.semaphore_signal(ready, 1, core_index=c)
  pl.semaphore_wait(ready, NUM_CORES)
  pltpu.sync_copy(staging_hbm, table)
  _score(x_hbm, o_hbm, x_rows, table, scores, core)


def _collective(fill_quarter):
  """A collective-table kernel; `fill_quarter(src, table, quarter)`."""

  @pl.kernel(scratch_types=_COLLECTIVE_SCRATCH, **_out_specs())
  def kernel(x_hbm, src_hbm, o_hbm, x_rows, scores):
    core = lax.axis_index('core')

    def body(table, ready, done):
      fill_quarter(src_hbm, table, _rows(core, CODES_PER_CORE))
      pl.semaphore_signal(ready, 1)
      pl.semaphore_wait(ready, NUM_CORES, decrement=False)
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


collective_copy = _collective(_copy_quarter)
collective_computed = _collective(_compute_quarter)
KERNELS = {
    'private_copy': (private_copy, False),
    'collective_copy': (collective_copy, False),
    'private_computed': (private_computed, True),
    'collective_computed': (collective_computed, True),
}


def main():
  args = _common.parse_args()
  _count_allocations()
  kx, kt = jax.random.split(jax.random.key(0))
  x = jax.random.normal(kx, (NUM_CORES * ROWS_PER_CORE, COLS), jnp.float32)
  table = jax.random.normal(kt, (CODES, COLS), jnp.float32)
  normalized = table / jnp.linalg.norm(table, axis=1, keepdims=True)
  fns, allocations = {}, {}
  for name, (kernel, computed) in KERNELS.items():
    f = jax.jit(kernel)
    call = lambda f=f: jax.tree.leaves(f(x, table))[0]
    expected = np.asarray(x) @ np.asarray(normalized if computed else table).T
    np.testing.assert_allclose(call(), expected, rtol=1e-4, atol=1e-3)
    # One counted call, after compilation.
    del _new_buffers[:]
    jax.block_until_ready(call())
    by_space = collections.defaultdict(lambda: [0, 0])
    for space, buffer in _new_buffers:
      by_space[space][0] += 1
      by_space[space][1] += buffer.size
      if space == 'vmem' and buffer.shape == (CODES, COLS):
        by_space['vmem_table'][0] += 1
        by_space['vmem_table'][1] += buffer.size
    allocations[name] = dict(by_space)
    fns[name] = lambda call=call: jax.block_until_ready(call())
  _common.emit({
      **_common.time_interleaved(fns, args.repeats),
      'allocations': allocations,
      'table_bytes': CODES * COLS * 4,
  })


if __name__ == '__main__':
  main()
