"""Deadlock detection on against off, for the deadlock figure.

Needs patched jax. Times, interleaved in one process, each kernel with
`InterpretParams(detect_deadlocks=True)` and `detect_deadlocks=False`:

- `mesh_8x4`: 8 devices (`shard_map`) x 4 cores (`pltpu.TensorCoreMesh`),
  32 simulated cores. In every round each core signals the next core of its
  device and the same core of the next device, then waits for its two
  signals: many waits that block, so the detector's bookkeeping runs often.
- `core_map_2`: the 2-core ping-pong kernel of the overhead figure.

Prints `{"wall": {...}, "cpu": {...}, "callbacks": {...}}` with names
`<kernel>_on` and `<kernel>_off`.
"""

from collections.abc import Callable
import jax

import overhead  # Sets 4 CPU devices; this workload needs 8.

NUM_DEVICES = 8
# Simulate NUM_DEVICES CPU devices; must happen before jax's first use.
jax.config.update('jax_num_cpu_devices', NUM_DEVICES)

# pylint: disable=g-import-not-at-top
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
import jax.numpy as jnp
import numpy as np

import _common
# pylint: enable=g-import-not-at-top

NUM_CORES = 4
ROUNDS = {'quick': 4, 'default': 16}
P = jax.sharding.PartitionSpec


def mesh_8x4(detect: bool, rounds: int) -> Callable[[], object]:
  """32 cores signal a neighbour core and a neighbour device every round."""
  rows, cols = 8, 128

  @pl.kernel(
      out_type=jax.ShapeDtypeStruct((NUM_CORES, rows, cols), jnp.float32),
      mesh=pltpu.TensorCoreMesh(axis_name='core', num_cores=NUM_CORES),
      scratch_types=[pltpu.VMEM((rows, cols), jnp.float32),
                     pltpu.SemaphoreType.REGULAR],
      interpret=pltpu.InterpretParams(detect_deadlocks=detect),
  )
  def kernel(x_hbm, o_hbm, buf, sem):
    core = lax.axis_index('core')
    device = lax.axis_index('x')
    pltpu.sync_copy(x_hbm, buf)

    def step(i, carry):
      buf[...] = buf[...] + 1.0
      pl.semaphore_signal(sem, 1, core_index=lax.rem(core + 1, NUM_CORES))
      pl.semaphore_signal(
          sem, 1, device_id=(lax.rem(device + 1, NUM_DEVICES),),
          core_index=core)
      pl.semaphore_wait(sem, 2)
      return carry

    lax.fori_loop(0, rounds, step, None)
    pltpu.sync_copy(buf, o_hbm.at[core])

  mesh = jax.make_mesh((NUM_DEVICES,), ('x',),
                       devices=jax.devices()[:NUM_DEVICES])
  f = jax.jit(jax.shard_map(
      kernel, mesh=mesh, in_specs=P('x'), out_specs=P('x'), check_vma=False))
  x = jax.random.normal(jax.random.key(4), (NUM_DEVICES * rows, cols))
  x = jax.device_put(x, jax.sharding.NamedSharding(mesh, P('x')))
  expected = np.repeat(np.asarray(x).reshape(NUM_DEVICES, 1, rows, cols),
                       NUM_CORES, axis=1).reshape(-1, rows, cols) + rounds
  np.testing.assert_allclose(f(x), expected, rtol=1e-6)
  return lambda: jax.block_until_ready(f(x))


def main():
  args = _common.parse_args()
  rounds = ROUNDS[args.size]
  fns = {}
  for detect, suffix in ((True, 'on'), (False, 'off')):
    fns[f'mesh_8x4_{suffix}'] = mesh_8x4(detect, rounds)
    fns[f'core_map_2_{suffix}'] = overhead.core_map_semaphores(
        pltpu.InterpretParams(detect_deadlocks=detect))
  timings = _common.time_interleaved(fns, args.repeats)
  _common.emit({**timings, 'callbacks': _common.count_callbacks(fns)})


if __name__ == '__main__':
  main()
