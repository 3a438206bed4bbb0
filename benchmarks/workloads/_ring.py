"""The ring all-gather kernel that `overhead.py` and `per_step.py` time.

Imports jax: a workload imports this module only after it has set
`jax_num_cpu_devices`.
"""

import jax
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
import jax.numpy as jnp


def all_gather(num_devices: int, rows: int, cols: int, interpret):
  """Returns a ring all-gather over mesh axis `'x'` of `num_devices` devices.

  Each device copies its (rows, cols) f32 block into its own slot of the
  output, signals both neighbours on the barrier semaphore and waits for
  both, then forwards one slot to its right neighbour per step with a remote
  DMA, `num_devices - 1` steps in all.

  Args:
    num_devices: Devices along mesh axis `'x'`.
    rows: Rows of each device's block.
    cols: Columns of each device's block.
    interpret: The `interpret` argument of `pl.pallas_call`.

  Returns:
    A `pallas_call` to run under `shard_map` over `'x'`, from a (rows, cols)
    f32 block to the (num_devices, rows, cols) f32 blocks of every device.
  """

  def kernel(x_ref, o_ref, send_sem, recv_sems):
    my_id = lax.axis_index('x')
    left = lax.rem(my_id + num_devices - 1, num_devices)
    right = lax.rem(my_id + 1, num_devices)
    pltpu.sync_copy(x_ref, o_ref.at[my_id])
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id={'x': left})
    pl.semaphore_signal(barrier, 1, device_id={'x': right})
    pl.semaphore_wait(barrier, 2)

    def step(s, carry):
      slot = lax.rem(my_id - s + num_devices, num_devices)
      send = pltpu.make_async_remote_copy(
          src_ref=o_ref.at[slot], dst_ref=o_ref.at[slot], send_sem=send_sem,
          recv_sem=recv_sems.at[slot], device_id={'x': right})
      send.start()
      send.wait_send()
      incoming = lax.rem(my_id - s - 1 + num_devices, num_devices)
      pltpu.make_async_copy(
          o_ref.at[incoming], o_ref.at[incoming], recv_sems.at[incoming]
      ).wait()
      return carry

    lax.fori_loop(0, num_devices - 1, step, None)

  return pl.pallas_call(
      kernel,
      out_shape=jax.ShapeDtypeStruct((num_devices, rows, cols), jnp.float32),
      in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
      out_specs=pl.BlockSpec(memory_space=pl.ANY),
      scratch_shapes=[pltpu.SemaphoreType.DMA,
                      pltpu.SemaphoreType.DMA((num_devices,))],
      compiler_params=pltpu.CompilerParams(collective_id=0),
      interpret=interpret,
  )
