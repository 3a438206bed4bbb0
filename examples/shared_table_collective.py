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

"""The TensorCores of one chip build a table together, then all use it.

The kernel scores rows of `x` against a codebook by cosine similarity: it
L2-normalizes every code (every row of the codebook) and multiplies each row
of `x` with the whole normalized codebook. Every core produces its own rows
of the scores, and every one of them needs *all* of the normalized codebook.
A core could normalize the whole codebook itself, but then each core repeats
the same work; or one core could do it while the others wait (see
`producer_consumer_event.py`). Here the cores split the work instead, and
share the result through a buffer that they allocate together:

1. `pl.run_scoped(..., collective_axes='core')` allocates the table (a VMEM
   buffer) and two REGULAR semaphores *collectively*: all cores of the chip
   get the same buffer, and each semaphore has one count that all of them
   signal and wait on. (Scratch without `collective_axes`, like the
   `scratch_types` of the kernel, is private to each core.)
2. Every core normalizes its slice of the codebook, writes it to its rows of
   the shared table and signals the `ready` semaphore once.
3. Every core loads its rows of `x` (work that does not need the table),
   then waits until all `NUM_CORES` cores have signalled `ready` and
   multiplies its rows with the whole table.

The wait is *non-decrementing*, `pl.semaphore_wait(ready, NUM_CORES,
decrement=False)`: it blocks until the count reaches `NUM_CORES` and leaves it
there, so every core can pass the same wait on the same count. It is also an
acquire, so race detection sees every core's writes of the table ordered
before every core's reads of it.

The counts must still get back to zero before the kernel ends, but no core
may consume `ready` while another core may still be waiting on it: that core
would then wait forever. So each core signals a second collective semaphore,
`done`, once it is past its wait, and core 0 waits until `done` reaches
`NUM_CORES` before it consumes both counts.

Each core also records, with `pl.semaphore_read`, the count of `ready` it
sees right after its wait (`NUM_CORES`: no core can drain it before every
core has signalled `done`), and core 0 records both counts after draining
them (0).

This runs on CPU in TPU interpret mode and needs a jax whose interpreter
supports `run_scoped` with `collective_axes` over the core axis,
non-decrementing waits and `pl.semaphore_read`.
"""

import sys

import jax
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
import jax.numpy as jnp
import numpy as np

import _report
from _report import mosaic_interpret

FEATURE = ('collective run_scoped over the core axis (one VMEM table and'
           ' semaphores shared by 4 TensorCores) with a non-decrementing wait')

NUM_CORES = 4
CODES = 128
CODES_PER_CORE = CODES // NUM_CORES
ROWS_PER_CORE = 16
ROWS = NUM_CORES * ROWS_PER_CORE
COLS = 128


def cosine_scores(
    x: jax.Array, codebook: jax.Array
) -> tuple[jax.Array, ...]:
  """Scores the rows of `x` against the L2-normalized codes, on all cores.

  Args:
    x: f32[ROWS, COLS], the rows to score.
    codebook: f32[CODES, COLS], one code per row, none all zero.

  Returns:
    A tuple of
    - table: f32[CODES, COLS], the codebook with every row scaled to unit L2
      norm, as built in the shared buffer.
    - scores: f32[ROWS, CODES], `x @ table.T`.
    - seen: i32[NUM_CORES], per core the count of `ready` right after its
      wait.
    - drained: i32[2], the counts of `ready` and `done` after core 0 consumed
      them.
  """
  mesh = _report.tensorcore_mesh('core', NUM_CORES)

  @_report.kernel(
      out_type=(
          jax.ShapeDtypeStruct((CODES, COLS), jnp.float32),
          jax.ShapeDtypeStruct((ROWS, CODES), jnp.float32),
          jax.ShapeDtypeStruct((NUM_CORES, 8, 128), jnp.int32),
      ),
      mesh=mesh,
      scratch_types=[
          pltpu.VMEM((CODES_PER_CORE, COLS), jnp.float32),  # This core's codes.
          pltpu.VMEM((ROWS_PER_CORE, COLS), jnp.float32),  # This core's x.
          pltpu.VMEM((ROWS_PER_CORE, CODES), jnp.float32),  # Its scores.
          pltpu.VMEM((8, 128), jnp.int32),  # Semaphore counts seen.
      ],
      interpret=_report.interpret_params(
          allow_non_decrementing_semaphore_wait=True,
          allow_collective_axes_in_run_scoped=True,
          detect_races=True,
      ),
  )
  def kernel(x_hbm, codebook_hbm, table_hbm, scores_hbm, counts_hbm,
             codes, x_rows, scores, counts):
    core = lax.axis_index('core')
    lane = lax.broadcasted_iota(jnp.int32, (8, 128), 1)

    def body(table, ready, done):
      # Build this core's slice of the shared table.
      code_rows = pl.ds(
          pl.multiple_of(core * CODES_PER_CORE, CODES_PER_CORE), CODES_PER_CORE
      )
      pltpu.sync_copy(codebook_hbm.at[code_rows], codes)
      c = codes[...]
      table[code_rows, :] = c * lax.rsqrt(jnp.sum(c * c, axis=1, keepdims=True))
      pl.semaphore_signal(ready, 1)

      # Load this core's rows of x while the other cores may still be
      # building their slices.
      x_slice = pl.ds(
          pl.multiple_of(core * ROWS_PER_CORE, ROWS_PER_CORE), ROWS_PER_CORE
      )
      pltpu.sync_copy(x_hbm.at[x_slice], x_rows)

      # Wait until every core's slice is in the table; leave the count.
      pl.semaphore_wait(ready, NUM_CORES, decrement=False)
      seen = pl.semaphore_read(ready)
      # Lanes 1 and 2 stay -1 unless core 0 drains the counts below.
      counts[...] = jnp.where(lane == 0, seen, -1)

      # x_rows @ table.T: every score uses every core's slice of the table.
      scores[...] = lax.dot_general(
          x_rows[...], table[...], (((1,), (1,)), ((), ())),
          preferred_element_type=jnp.float32,
      )
      pltpu.sync_copy(scores, scores_hbm.at[x_slice])

      @pl.when(core == 0)
      def _copy_table_out():
        pltpu.sync_copy(table, table_hbm)

      # This core is past its wait and done with the table.
      pl.semaphore_signal(done, 1)

      @pl.when(core == 0)
      def _drain():
        # Only once every core is past its wait may `ready` be consumed.
        pl.semaphore_wait(done, NUM_CORES)
        pl.semaphore_wait(ready, NUM_CORES)
        counts[...] = jnp.where(
            lane == 0, seen,
            jnp.where(lane == 1, pl.semaphore_read(ready),
                      pl.semaphore_read(done)),
        )

    pl.run_scoped(
        body,
        pltpu.VMEM((CODES, COLS), jnp.float32),  # The shared table.
        pltpu.SemaphoreType.REGULAR,  # ready: slices written.
        pltpu.SemaphoreType.REGULAR,  # done: cores past their wait.
        collective_axes='core',
    )
    pltpu.sync_copy(counts, counts_hbm.at[core])

  table, scores, counts = kernel(x, codebook)
  return table, scores, counts[:, 0, 0], counts[0, 0, 1:3]


def run() -> list[_report.Row]:
  """Runs the kernel and returns (name, result, expected) rows."""
  kx, kc = jax.random.split(jax.random.key(0))
  x = jax.random.normal(kx, (ROWS, COLS), jnp.float32)
  codebook = jax.random.normal(kc, (CODES, COLS), jnp.float32)
  table, scores, seen, drained = jax.block_until_ready(
      cosine_scores(x, codebook)
  )

  x_np = np.asarray(x, np.float64)
  codebook_np = np.asarray(codebook, np.float64)
  table_np = codebook_np / np.linalg.norm(codebook_np, axis=1, keepdims=True)
  # One shared count each: every core signals `ready` and `done` once, so
  # both reach NUM_CORES; core 0 then consumes NUM_CORES of each.
  signalled = np.ones(NUM_CORES, np.int32).sum()
  return [
      ('normalized table', np.asarray(table), table_np.astype(np.float32)),
      ('cosine scores', np.asarray(scores),
       (x_np @ table_np.T).astype(np.float32)),
      ('ready count seen after wait', np.asarray(seen),
       np.full((NUM_CORES,), signalled, np.int32)),
      ('ready/done counts drained', np.asarray(drained),
       np.full((2,), signalled - NUM_CORES, np.int32)),
      ('races found', np.array(mosaic_interpret.races.races_found),
       np.array(False)),
  ]


if __name__ == '__main__':
  sys.exit(_report.main(run, FEATURE))
