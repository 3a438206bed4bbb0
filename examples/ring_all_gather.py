"""A ring all-gather over 4 devices behind a neighbour barrier.

Each device holds one (8, 128) block; the kernel gives every device all of
them, moving blocks one hop right per step with remote DMAs. First each
device signals both neighbours' barrier semaphore and waits for both
signals: `pl.semaphore_wait(barrier, 2, decrement=False)` leaves the count at
2 so `pl.semaphore_read` can record it, then an ordinary wait consumes it.
Each slot of the output has its own receive semaphore, because DMAs that
signal one semaphore may complete in any order (as the interpreter's default
`dma_execution_mode='on_wait'` does on purpose). Runs in both DMA modes.
"""
import sys

import jax
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
import jax.numpy as jnp
import numpy as np

N = 4  # Devices.
jax.config.update('jax_num_cpu_devices', N)  # Before jax starts.
P = jax.sharding.PartitionSpec


def kernel(x_ref, o_ref, counts_ref, send_sem, recv_sems):
  me = lax.axis_index('x')
  left, right = lax.rem(me + N - 1, N), lax.rem(me + 1, N)
  pltpu.sync_copy(x_ref, o_ref.at[me])  # Our own block, into our slot.
  barrier = pltpu.get_barrier_semaphore()
  pl.semaphore_signal(barrier, 1, device_id=(left,))
  pl.semaphore_signal(barrier, 1, device_id=(right,))
  pl.semaphore_wait(barrier, 2, decrement=False)  # Both neighbours are in.
  counts_ref[0] = pl.semaphore_read(barrier)
  pl.semaphore_wait(barrier, 2)  # Consume, for the next kernel.
  counts_ref[1] = pl.semaphore_read(barrier)

  @pl.loop(0, N - 1)
  def _(s):  # Forward the block of device me - s; receive that of me - s - 1.
    slot, incoming = lax.rem(me - s + N, N), lax.rem(me - s - 1 + N, N)
    send = pltpu.make_async_remote_copy(
        o_ref.at[slot], o_ref.at[slot], send_sem, recv_sems.at[slot],
        device_id=(right,))
    send.start()
    send.wait_send()
    pltpu.make_async_copy(o_ref.at[incoming], o_ref.at[incoming],
                          recv_sems.at[incoming]).wait()


mesh = jax.make_mesh((N,), ('x',))
x = jax.random.uniform(jax.random.key(0), (N * 8, 128))
x = jax.device_put(x, jax.sharding.NamedSharding(mesh, P('x')))
ok = True
for mode in ('on_wait', 'eager'):
  gather = pl.pallas_call(
      kernel,
      out_shape=(jax.ShapeDtypeStruct((N, 8, 128), jnp.float32),
                 jax.ShapeDtypeStruct((2,), jnp.int32)),
      in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
      out_specs=(pl.BlockSpec(memory_space=pl.ANY),
                 pl.BlockSpec(memory_space=pltpu.SMEM)),
      scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA((N,))],
      compiler_params=pltpu.CompilerParams(collective_id=0),
      interpret=pltpu.InterpretParams(
          allow_non_decrementing_semaphore_wait=True, detect_races=True,
          dma_execution_mode=mode))
  gathered, counts = jax.jit(jax.shard_map(
      gather, mesh=mesh, in_specs=P('x'), out_specs=(P('x'), P('x')),
      check_vma=False))(x)
  print(f'{mode}: barrier count held/consumed per device:',
        np.asarray(counts).reshape(N, 2).tolist())
  ok &= (np.array_equal(np.asarray(gathered).reshape(N, N * 8, 128),
                        np.broadcast_to(np.asarray(x), (N, N * 8, 128)))
         and (np.asarray(counts).reshape(N, 2) == [2, 0]).all())
print('ok' if ok else 'MISMATCH')
sys.exit(0 if ok else 1)
