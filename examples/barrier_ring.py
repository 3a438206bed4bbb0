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

"""A ring all-gather across devices, behind a neighbour barrier.

Each of `NUM_DEVICES` devices holds one (8, 128) block of a matrix sharded by
rows; the kernel gives every device the whole matrix. The devices form a ring
and move blocks one hop to the right per step with remote DMAs: at step `s`,
device `d` forwards the block that originated on device `d - s` (its own at
step 0, then the one it received at the previous step) and receives the block
of device `d - s - 1` from its left neighbour. After `NUM_DEVICES - 1` steps
every device holds every block. Only neighbours ever talk, which is what a
ring of TPU chips connected by ICI links is good at.

Before the first remote DMA the kernel synchronizes with its neighbours on
the barrier semaphore (`pltpu.get_barrier_semaphore()`): a device may not
write into a neighbour's output before that neighbour has entered the
kernel. Each device signals both neighbours and waits for both signals.
Here the wait is split to *observe* the barrier while debugging:
`pl.semaphore_wait(barrier, 2, decrement=False)` blocks until both
neighbours have arrived and leaves the count alone, so
`pl.semaphore_read(barrier)` can record it (2); `pl.semaphore_wait(barrier,
2)` then consumes the barrier (0), so that the next kernel to use the barrier
semaphore starts from zero.

No barrier is needed between the steps: every slot of the output is written
exactly once (by the DMA from the left neighbour, or by the initial local
copy of the device's own block), so a neighbour running a step ahead cannot
overwrite data that is still in use. What *is* needed is one receive
semaphore per slot. DMAs that signal the same semaphore may complete in any
order, on hardware as in the interpreter (whose default
`dma_execution_mode='on_wait'` completes pending DMAs out of order on
purpose). With a single receive semaphore counting every block's data,
"one block has arrived" would not mean "the block I forward next has
arrived"; with a semaphore per slot, each step waits for exactly that block.
Race detection checks that every read of a slot is ordered after its write,
in both DMA execution modes.

Runs on 4 simulated CPU devices in TPU interpret mode and needs a jax whose
interpreter supports non-decrementing waits and `pl.semaphore_read`.
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

FEATURE = ('non-decrementing wait and semaphore_read on the barrier semaphore,'
           ' signalled by the neighbouring devices (4 devices)')

NUM_DEVICES = 4
# Simulate NUM_DEVICES CPU devices; must happen before jax's first use.
jax.config.update('jax_num_cpu_devices', NUM_DEVICES)

P = jax.sharding.PartitionSpec

BLOCK_ROWS = 8
COLS = 128


def ring_all_gather_kernel(x_ref, o_ref, counts_ref, send_sem, recv_sems):
  """All-gathers the blocks of all devices along the ring axis 'x'.

  Args:
    x_ref: f32[BLOCK_ROWS, COLS] in HBM, this device's block.
    o_ref: f32[NUM_DEVICES, BLOCK_ROWS, COLS] in HBM; slot `i` receives the
      block of device `i`.
    counts_ref: i32[2] in SMEM: the barrier semaphore count observed while
      the barrier is held, and after it is consumed.
    send_sem: DMA semaphore for outgoing blocks.
    recv_sems: DMA semaphores[NUM_DEVICES]; `recv_sems[i]` is signalled when
      slot `i` has been received.
  """
  my_id = lax.axis_index('x')
  left = lax.rem(my_id + NUM_DEVICES - 1, NUM_DEVICES)
  right = lax.rem(my_id + 1, NUM_DEVICES)

  # Our own block goes to our own slot; the ring brings the others.
  pltpu.sync_copy(x_ref, o_ref.at[my_id])

  # Neighbour barrier: both neighbours must be in the kernel before we DMA
  # into them (and they into us).
  barrier = pltpu.get_barrier_semaphore()
  # Device ids are mesh coordinates as tuples, which every version of TPU
  # interpret mode takes (older ones take no dicts).
  pl.semaphore_signal(barrier, 1, device_id=(left,))
  pl.semaphore_signal(barrier, 1, device_id=(right,))
  pl.semaphore_wait(barrier, 2, decrement=False)  # Observe without consuming.
  counts_ref[0] = pl.semaphore_read(barrier)
  pl.semaphore_wait(barrier, 2)  # Consume.
  counts_ref[1] = pl.semaphore_read(barrier)

  def step(s, carry):
    # Forward the block of device `my_id - s` (ours at step 0, received at
    # step `s - 1` after that) into the same slot of the right neighbour,
    # whose `recv_sems[slot]` it signals.
    slot = lax.rem(my_id - s + NUM_DEVICES, NUM_DEVICES)
    send = pltpu.make_async_remote_copy(
        src_ref=o_ref.at[slot],
        dst_ref=o_ref.at[slot],
        send_sem=send_sem,
        recv_sem=recv_sems.at[slot],
        device_id=(right,),
    )
    send.start()
    send.wait_send()
    # Wait for the block of device `my_id - s - 1` from the left neighbour.
    # Only the semaphore and the size of the descriptor matter for the wait.
    incoming = lax.rem(my_id - s - 1 + NUM_DEVICES, NUM_DEVICES)
    pltpu.make_async_copy(
        o_ref.at[incoming], o_ref.at[incoming], recv_sems.at[incoming]
    ).wait()
    return carry

  lax.fori_loop(0, NUM_DEVICES - 1, step, None)


def ring_all_gather(
    x: jax.Array, mesh: jax.sharding.Mesh, dma_execution_mode: str
) -> tuple[jax.Array, jax.Array]:
  """Gathers the row blocks of `x` onto every device of `mesh`.

  Args:
    x: f32[NUM_DEVICES * BLOCK_ROWS, COLS], sharded by rows over mesh axis
      'x'.
    mesh: A 1D mesh of NUM_DEVICES devices with axis 'x'.
    dma_execution_mode: 'on_wait' or 'eager', see `pltpu.InterpretParams`.

  Returns:
    A tuple of
    - gathered: f32[NUM_DEVICES * NUM_DEVICES * BLOCK_ROWS, COLS], the copies
      of `x` held by the devices, stacked in device order.
    - counts: i32[NUM_DEVICES * 2], the barrier counts of each device.
  """
  gather = pl.pallas_call(
      ring_all_gather_kernel,
      out_shape=(
          jax.ShapeDtypeStruct((NUM_DEVICES, BLOCK_ROWS, COLS), jnp.float32),
          jax.ShapeDtypeStruct((2,), jnp.int32),
      ),
      in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
      out_specs=(
          pl.BlockSpec(memory_space=pl.ANY),
          pl.BlockSpec(memory_space=pltpu.SMEM),
      ),
      scratch_shapes=[
          pltpu.SemaphoreType.DMA,
          pltpu.SemaphoreType.DMA((NUM_DEVICES,)),
      ],
      compiler_params=pltpu.CompilerParams(collective_id=0),
      interpret=_report.interpret_params(
          allow_non_decrementing_semaphore_wait=True,
          detect_races=True, dma_execution_mode=dma_execution_mode
      ),
  )

  def per_device(block):
    gathered, counts = gather(block)
    return gathered.reshape(NUM_DEVICES * BLOCK_ROWS, COLS), counts

  return jax.jit(
      jax.shard_map(
          per_device,
          mesh=mesh,
          in_specs=P('x'),
          out_specs=(P('x'), P('x')),
          check_vma=False,
      )
  )(x)


def run() -> list[_report.Row]:
  """Runs the kernel in both DMA execution modes; returns the rows."""
  if jax.device_count() < NUM_DEVICES:
    raise RuntimeError(
        f'needs {NUM_DEVICES} devices, found {jax.device_count()}: import'
        ' this module before jax is first used'
    )
  mesh = jax.make_mesh(
      (NUM_DEVICES,), ('x',), devices=jax.devices()[:NUM_DEVICES]
  )
  x = jax.random.uniform(
      jax.random.key(0), (NUM_DEVICES * BLOCK_ROWS, COLS), jnp.float32
  )
  x = jax.device_put(x, jax.sharding.NamedSharding(mesh, P('x')))
  x_np = np.asarray(x)

  # What the barrier semaphore of each device holds: one signal from each
  # neighbour, then that minus the value the consuming wait subtracts.
  ids = np.arange(NUM_DEVICES)
  signals = np.zeros(NUM_DEVICES, np.int32)
  np.add.at(signals, (ids + NUM_DEVICES - 1) % NUM_DEVICES, 1)  # To left.
  np.add.at(signals, (ids + 1) % NUM_DEVICES, 1)  # To right.
  counts_np = np.stack([signals, signals - 2], axis=1).reshape(-1)

  print('The kernel runs twice; each row starts with the DMA execution mode'
        " (InterpretParams(dma_execution_mode=...)) of its run: 'on_wait',"
        ' the default, completes a DMA when its semaphore is waited on, in'
        " any order; 'eager' completes it when it starts.")
  rows = []
  for mode in ('on_wait', 'eager'):
    gathered, counts = jax.block_until_ready(ring_all_gather(x, mesh, mode))
    rows += [
        (f'{mode}: all-gathered copies', np.asarray(gathered),
         np.tile(x_np, (NUM_DEVICES, 1))),
        (f'{mode}: barrier counts held/consumed', np.asarray(counts),
         counts_np),
        (f'{mode}: races found', np.array(mosaic_interpret.races.races_found),
         np.array(False)),
    ]
  return rows


if __name__ == '__main__':
  sys.exit(_report.main(run, FEATURE))
