"""One TensorCore raises a flag; every core polls it without consuming it.

Core 0 computes the per-column scale `max(|x|)`, writes it to HBM and raises
a flag on every core (`pl.semaphore_signal(flag, 1, core_index=c)`). Each core
then normalizes its rows chunk by chunk. Before each chunk it waits for the
flag with `pl.semaphore_wait(flag, 1, decrement=False)`, which returns once
the count is >= 1 and leaves it at 1, so the wait can simply be repeated.
At the end each core consumes the flag with an ordinary wait, so that every
semaphore ends the kernel at zero.
"""
import sys

import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
import jax.numpy as jnp
import numpy as np

CORES, CHUNKS, ROWS, COLS = 4, 2, 8, 128  # ROWS: rows per chunk.

mesh = pltpu.TensorCoreMesh(axis_name='core', num_cores=CORES)
f32 = jnp.float32


@pl.kernel(
    out_type=(jax.ShapeDtypeStruct((ROWS, COLS), f32),  # The scale table.
              jax.ShapeDtypeStruct((CORES * CHUNKS * ROWS, COLS), f32),
              jax.ShapeDtypeStruct((CORES, ROWS, COLS), jnp.int32)),
    mesh=mesh,
    scratch_types=[pltpu.VMEM((CORES * CHUNKS * ROWS, COLS), f32),
                   pltpu.VMEM((ROWS, COLS), f32),
                   pltpu.VMEM((ROWS, COLS), f32),
                   pltpu.VMEM((ROWS, COLS), jnp.int32),
                   pltpu.SemaphoreType.REGULAR],
    interpret=pltpu.InterpretParams(
        allow_non_decrementing_semaphore_wait=True, detect_races=True),
)
def normalize_columns(x_hbm, table_hbm, y_hbm, counts_hbm,
                      x_all, table, chunk, counts, flag):
  core = jax.lax.axis_index('core')

  @pl.when(core == 0)
  def _produce():
    pltpu.sync_copy(x_hbm, x_all)
    scale = jnp.max(jnp.abs(x_all[...]), axis=0, keepdims=True)
    table[...] = jnp.broadcast_to(scale, (ROWS, COLS))
    pltpu.sync_copy(table, table_hbm)
    for c in range(CORES):  # Raise the flag on every core.
      pl.semaphore_signal(flag, 1, core_index=c)

  @pl.loop(0, CHUNKS)
  def _consume(i):
    rows = pl.ds(pl.multiple_of((core * CHUNKS + i) * ROWS, ROWS), ROWS)
    pltpu.sync_copy(x_hbm.at[rows], chunk)
    pl.semaphore_wait(flag, 1, decrement=False)  # Table ready? Keep the flag.
    pltpu.sync_copy(table_hbm, table)
    chunk[...] = chunk[...] / table[...]
    pltpu.sync_copy(chunk, y_hbm.at[rows])

  raised = pl.semaphore_read(flag)
  pl.semaphore_wait(flag, 1)  # Consume the flag.
  lane = jax.lax.broadcasted_iota(jnp.int32, (ROWS, COLS), 1)
  counts[...] = jnp.where(lane == 0, raised, pl.semaphore_read(flag))
  pltpu.sync_copy(counts, counts_hbm.at[core])


x = jax.random.normal(jax.random.key(0), (CORES * CHUNKS * ROWS, COLS), f32)
table, y, counts = normalize_columns(x)
scale = np.abs(np.asarray(x)).max(axis=0)
counts = np.asarray(counts)[:, 0, :2]
print('flag count while raised / after consuming, per core:', counts.tolist())
print('max |y - x / scale|:', np.abs(y - np.asarray(x) / scale).max())
ok = (np.allclose(table, np.broadcast_to(scale, (ROWS, COLS)))
      and np.allclose(y, np.asarray(x) / scale)
      and (counts == [[1, 0]] * CORES).all())
print('ok' if ok else 'MISMATCH')
sys.exit(0 if ok else 1)
