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

"""A producer/consumer event between the TensorCores of one chip.

The kernel normalizes a matrix column by column: every row is divided by the
largest magnitude of its column. That needs one statistic of the *whole*
matrix (the per-column scale table) before any core can produce its rows, so
the work is split in two phases:

1. Core 0, the producer, reads all of `x`, computes the scale table and
   writes it to an HBM buffer that all cores of the chip share. It then
   raises an *event*: it signals the REGULAR semaphore of every core
   (`pl.semaphore_signal(sem, 1, core_index=c)`), itself included.
2. Every core, as a consumer, normalizes its own rows of `x`, in chunks. It
   loads a chunk first (work that does not need the table) and only then
   waits for the event.

The wait for the event is a *non-decrementing* wait,
`pl.semaphore_wait(sem, 1, decrement=False)`: it blocks until the event is
raised and leaves it raised. That makes "make sure the table is ready"
idempotent, so each chunk can call it right before it reads the table,
however many chunks a core has, instead of threading a "have I waited yet"
flag through the loop. It is also an acquire, so race detection sees the
producer's writes of the table ordered before the consumers' reads. Once a
core is done with the table it consumes the event with one ordinary
(decrementing) wait, so every semaphore ends the kernel at zero.

Each core also records the count it sees while the event is raised (1) and
after consuming it (0), with `pl.semaphore_read`.

This runs on CPU in TPU interpret mode and needs a jax whose interpreter
supports non-decrementing waits and `pl.semaphore_read`.
"""

import sys

import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
import jax.numpy as jnp
import numpy as np

import _report
from _report import mosaic_interpret

FEATURE = ('non-decrementing wait as an event raised by one core for all'
           ' cores (core_index signals), and semaphore_read (4 TensorCores)')

NUM_CORES = 4
CHUNKS_PER_CORE = 2
CHUNK_ROWS = 8
COLS = 128
ROWS = NUM_CORES * CHUNKS_PER_CORE * CHUNK_ROWS


def normalize_columns(x: jax.Array) -> tuple[jax.Array, ...]:
  """Divides each column of `x` by its largest magnitude, on all cores.

  Args:
    x: f32[ROWS, COLS], with no column all zero.

  Returns:
    A tuple of
    - table: f32[CHUNK_ROWS, COLS], the per-column scale `max(|x|, axis=0)`,
      repeated on every row (a full (8, 128) tile).
    - y: f32[ROWS, COLS], `x / table[0]`.
    - counts: i32[NUM_CORES, 2], per core the semaphore count seen while the
      event is raised and after consuming it.
  """
  mesh = _report.tensorcore_mesh('core', NUM_CORES)

  @_report.kernel(
      out_type=(
          jax.ShapeDtypeStruct((CHUNK_ROWS, COLS), jnp.float32),
          jax.ShapeDtypeStruct((ROWS, COLS), jnp.float32),
          jax.ShapeDtypeStruct((NUM_CORES, 8, 128), jnp.int32),
      ),
      mesh=mesh,
      scratch_types=[
          pltpu.VMEM((ROWS, COLS), jnp.float32),  # Producer: all of x.
          pltpu.VMEM((CHUNK_ROWS, COLS), jnp.float32),  # Table tile.
          pltpu.VMEM((CHUNK_ROWS, COLS), jnp.float32),  # Chunk of x, then y.
          pltpu.VMEM((8, 128), jnp.int32),  # Semaphore counts seen.
          pltpu.SemaphoreType.REGULAR,  # The "table is ready" event.
      ],
      interpret=_report.interpret_params(
          allow_non_decrementing_semaphore_wait=True,
          detect_races=True,
      ),
  )
  def kernel(x_hbm, table_hbm, y_hbm, counts_hbm,
             x_all, table, chunk, counts, table_ready):
    core = jax.lax.axis_index('core')

    @pl.when(core == 0)
    def _produce():
      pltpu.sync_copy(x_hbm, x_all)
      scale = jnp.max(jnp.abs(x_all[...]), axis=0, keepdims=True)
      table[...] = jnp.broadcast_to(scale, (CHUNK_ROWS, COLS))
      pltpu.sync_copy(table, table_hbm)
      # Raise the event on every consumer, after the table is in HBM.
      for c in range(NUM_CORES):
        pl.semaphore_signal(table_ready, 1, core_index=c)

    def consume_chunk(i, carry):
      row = pl.multiple_of(
          (core * CHUNKS_PER_CORE + i) * CHUNK_ROWS, CHUNK_ROWS
      )
      pltpu.sync_copy(x_hbm.at[pl.ds(row, CHUNK_ROWS)], chunk)
      # Ensure the table is ready; a no-op once the event is raised.
      pl.semaphore_wait(table_ready, 1, decrement=False)
      pltpu.sync_copy(table_hbm, table)
      chunk[...] = chunk[...] / table[...]
      pltpu.sync_copy(chunk, y_hbm.at[pl.ds(row, CHUNK_ROWS)])
      return carry

    jax.lax.fori_loop(0, CHUNKS_PER_CORE, consume_chunk, None)

    raised = pl.semaphore_read(table_ready)
    pl.semaphore_wait(table_ready, 1)  # Consume the event.
    consumed = pl.semaphore_read(table_ready)
    lane = jax.lax.broadcasted_iota(jnp.int32, (8, 128), 1)
    counts[...] = jnp.where(lane == 0, raised, consumed)
    pltpu.sync_copy(counts, counts_hbm.at[core])

  table, y, counts = kernel(x)
  return table, y, counts[:, 0, :2]


def run() -> list[_report.Row]:
  """Runs the kernel and returns (name, result, expected) rows."""
  x = jax.random.normal(jax.random.key(0), (ROWS, COLS), jnp.float32)
  table, y, counts = jax.block_until_ready(normalize_columns(x))

  x_np = np.asarray(x)
  scale = np.abs(x_np).max(axis=0)
  # The producer signals each core once; each core consumes one count.
  raised = np.zeros(NUM_CORES, np.int32)
  np.add.at(raised, np.arange(NUM_CORES), 1)
  return [
      ('scale table', np.asarray(table),
       np.broadcast_to(scale, (CHUNK_ROWS, COLS))),
      ('normalized rows', np.asarray(y), x_np / scale),
      ('counts raised/consumed', np.asarray(counts),
       np.stack([raised, raised - 1], axis=1)),
      ('races found', np.array(mosaic_interpret.races.races_found),
       np.array(False)),
  ]


if __name__ == '__main__':
  sys.exit(_report.main(run, FEATURE))
