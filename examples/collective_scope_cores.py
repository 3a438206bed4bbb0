"""The TensorCores of a chip build one table together in a collective scope.

`pl.run_scoped(..., collective_axes='core')` gives all cores one VMEM table
and two REGULAR semaphores. Each core L2-normalizes its slice of a codebook
into the table and signals `ready`, waits until all cores have (a wait with
`decrement=False` leaves the count at CORES, so every core passes it), and
scores its rows of `x` against the whole table. Once every core is past its wait
(has signalled `done`), core 0 drains both counts.
"""
import sys

import jax
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
import jax.numpy as jnp
import numpy as np

CORES, CODES, ROWS, COLS = 4, 128, 16, 128  # ROWS: rows of x per core.
SLICE = CODES // CORES  # Codes per core.
f32 = jnp.float32


@pl.kernel(
    out_type=(jax.ShapeDtypeStruct((CODES, COLS), f32),
              jax.ShapeDtypeStruct((CORES * ROWS, CODES), f32),
              jax.ShapeDtypeStruct((CORES,), jnp.int32)),
    mesh=pltpu.TensorCoreMesh(axis_name='core', num_cores=CORES),
    scratch_types=[
        pltpu.VMEM((SLICE, COLS), f32), pltpu.VMEM((ROWS, COLS), f32),
        pltpu.VMEM((ROWS, CODES), f32), pltpu.SMEM((1,), jnp.int32)],
    interpret=pltpu.InterpretParams(
        allow_non_decrementing_semaphore_wait=True,
        allow_collective_axes_in_run_scoped=True, detect_races=True),
)
def cosine_scores(x_hbm, codebook_hbm, table_hbm, scores_hbm, seen_hbm,
                  codes, x_rows, scores, seen):
  core = lax.axis_index('core')

  def body(table, ready, done):  # Shared by all cores.
    mine = pl.ds(pl.multiple_of(core * SLICE, SLICE), SLICE)
    pltpu.sync_copy(codebook_hbm.at[mine], codes)
    c = codes[...]
    table[mine, :] = c * lax.rsqrt(jnp.sum(c * c, axis=1, keepdims=True))
    pl.semaphore_signal(ready, 1)
    rows = pl.ds(pl.multiple_of(core * ROWS, ROWS), ROWS)
    pltpu.sync_copy(x_hbm.at[rows], x_rows)
    pl.semaphore_wait(ready, CORES, decrement=False)  # Every slice is in.
    seen[0] = pl.semaphore_read(ready)
    scores[...] = lax.dot_general(x_rows[...], table[...],
                                  (((1,), (1,)), ((), ())))
    pltpu.sync_copy(scores, scores_hbm.at[rows])
    pltpu.sync_copy(seen, seen_hbm.at[pl.ds(core, 1)])
    pl.semaphore_signal(done, 1)

    @pl.when(core == 0)
    def _():  # Consume `ready` only once no core can still be waiting on it.
      pl.semaphore_wait(done, CORES)
      pl.semaphore_wait(ready, CORES)
      pltpu.sync_copy(table, table_hbm)

  pl.run_scoped(body, pltpu.VMEM((CODES, COLS), f32),
                pltpu.SemaphoreType.REGULAR, pltpu.SemaphoreType.REGULAR,
                collective_axes='core')


x = jax.random.normal(jax.random.key(0), (CORES * ROWS, COLS), f32)
codebook = jax.random.normal(jax.random.key(1), (CODES, COLS), f32)
table, scores, seen = cosine_scores(x, codebook)
want = np.asarray(codebook, np.float64)
want /= np.linalg.norm(want, axis=1, keepdims=True)  # The normalized codes.
want_scores = np.asarray(x, np.float64) @ want.T
print('ready count:', np.asarray(seen).tolist(), 'expected:', [CORES] * CORES)
print('max |table - numpy|:', np.abs(table - want).max(),
      'max |scores - numpy|:', np.abs(scores - want_scores).max())
ok = (np.allclose(table, want, atol=1e-6) and (np.asarray(seen) == CORES).all()
      and np.allclose(scores, want_scores, atol=1e-4))
print('ok' if ok else 'MISMATCH')
sys.exit(0 if ok else 1)
