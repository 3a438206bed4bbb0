"""A collective scope under `shard_map`: one shared table per device.

Runs on 2 simulated devices of 4 TensorCores each. On each device, every
core sums its rows of `x` into its row of a VMEM table that the cores share
(`pl.run_scoped(..., collective_axes='core')`), then signals every core's
private semaphore and waits for all of them (a barrier), and reads the whole
table to get its device's column sums. The devices do not share the table:
each device has its own, so each device's result is the sum of its own shard.
"""
import sys

import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
import jax.numpy as jnp
import numpy as np

DEVICES, CORES, ROWS, COLS = 2, 4, 8, 128  # ROWS: rows per core.
jax.config.update('jax_num_cpu_devices', DEVICES)  # Before jax starts.
P = jax.sharding.PartitionSpec
f32 = jnp.float32


@pl.kernel(
    out_type=jax.ShapeDtypeStruct((CORES, 8, COLS), f32),
    mesh=pltpu.TensorCoreMesh(axis_name='core', num_cores=CORES),
    scratch_types=[pltpu.VMEM((ROWS, COLS), f32), pltpu.VMEM((8, COLS), f32),
                   pltpu.SemaphoreType.REGULAR],
    interpret=pltpu.InterpretParams(allow_collective_axes_in_run_scoped=True,
                                    detect_races=True),
)
def column_sums(x_hbm, out_hbm, rows, total, arrived):
  core = jax.lax.axis_index('core')

  def body(table):  # One (CORES, COLS) table per device, shared by its cores.
    pltpu.sync_copy(x_hbm.at[pl.ds(core * ROWS, ROWS)], rows)
    table[pl.ds(core, 1), :] = jnp.sum(rows[...], axis=0, keepdims=True)
    for c in range(CORES):  # Barrier: tell every core this row is written.
      pl.semaphore_signal(arrived, 1, core_index=c)
    pl.semaphore_wait(arrived, CORES)
    total[...] = jnp.broadcast_to(jnp.sum(table[...], axis=0), (8, COLS))
    pltpu.sync_copy(total, out_hbm.at[core])

  pl.run_scoped(body, pltpu.VMEM((CORES, COLS), f32), collective_axes='core')


mesh = jax.make_mesh((DEVICES,), ('x',))
x = jax.random.normal(jax.random.key(0), (DEVICES * CORES * ROWS, COLS), f32)
x = jax.device_put(x, jax.sharding.NamedSharding(mesh, P('x')))
sums = jax.jit(jax.shard_map(column_sums, mesh=mesh, in_specs=P('x'),
                             out_specs=P('x'), check_vma=False))(x)
sums = np.asarray(sums).reshape(DEVICES, CORES, 8, COLS)
want = np.asarray(x).reshape(DEVICES, CORES * ROWS, COLS).sum(axis=1)
print('device 0 / device 1 sum of column 0:', sums[:, 0, 0, 0].tolist())
print('numpy:                               ', want[:, 0].tolist())
ok = np.allclose(sums, want[:, None, None, :], atol=1e-4)
print('ok' if ok else 'MISMATCH')
sys.exit(0 if ok else 1)
