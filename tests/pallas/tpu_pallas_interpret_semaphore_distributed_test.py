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

"""Tests for semaphores across devices in TPU interpret mode.

To work around https://github.com/jax-ml/jax/issues/25671 , this file
contains only tests that use shard_map.
"""

import sys

from absl.testing import absltest
from absl.testing import parameterized
import jax
from jax import lax
from jax._src import shard_map
from jax._src import test_util as jtu
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
import jax.numpy as jnp
import numpy as np
import tpu_interpret_test_util as test_util
from tpu_interpret_test_util import mosaic_interpret

jax.config.parse_flags_with_absl()
jtu.request_cpu_devices(4)

P = jax.sharding.PartitionSpec

# TODO(jburnim): Figure out how to safely run different instance of TPU
# interpret mode in parallel, and then remove this decorator.
@jtu.thread_unsafe_test_class()
class InterpretSemaphoreDistributedTest(test_util.InterpretDistributedTestCase):

  @parameterized.product(
      dma_execution_mode=['eager', 'on_wait'],
      detect_races=[True, False],
  )
  def test_barrier_ring_with_nondecrementing_waits(
      self, dma_execution_mode, detect_races
  ):
    # Each device signals the barrier semaphore of both neighbours, polls it
    # without consuming it, records the count, consumes it, and then sends its
    # block to its right neighbour.
    num_devices = 4
    partition = P(None, 'x')
    mesh = jtu.create_mesh((num_devices,), ('x',))
    sharding = jax.sharding.NamedSharding(mesh, partition)

    def kernel(x_ref, o_ref, count_ref, send_sem, recv_sem):
      my_id = lax.axis_index('x')
      left_neighbor = lax.rem(my_id + num_devices - 1, num_devices)
      right_neighbor = lax.rem(my_id + 1, num_devices)

      barrier_sem = pltpu.get_barrier_semaphore()
      pl.semaphore_signal(barrier_sem, device_id=(left_neighbor,))
      pl.semaphore_signal(barrier_sem, device_id=(right_neighbor,))
      pl.semaphore_wait(barrier_sem, 2, decrement=False)
      pl.semaphore_wait(barrier_sem, 1, decrement=False)
      count_ref[0] = pl.semaphore_read(barrier_sem)
      pl.semaphore_wait(barrier_sem, 2)
      count_ref[1] = pl.semaphore_read(barrier_sem)

      copy = pltpu.make_async_remote_copy(
          src_ref=x_ref,
          dst_ref=o_ref,
          send_sem=send_sem,
          recv_sem=recv_sem,
          device_id=(right_neighbor,),
      )
      copy.start()
      copy.wait()

    ring = pl.pallas_call(
        kernel,
        out_shape=(
            jax.ShapeDtypeStruct((8, 128), jnp.float32),
            jax.ShapeDtypeStruct((2,), jnp.int32),
        ),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=(
            pl.BlockSpec(memory_space=pl.ANY),
            pl.BlockSpec(memory_space=pltpu.SMEM),
        ),
        scratch_shapes=[pltpu.SemaphoreType.DMA] * 2,
        compiler_params=pltpu.CompilerParams(collective_id=7),
        interpret=test_util.interpret_params(
            allow_non_decrementing_semaphore_wait=True,
            dma_execution_mode=dma_execution_mode, detect_races=detect_races,
            on_race='warn'
        ),
    )
    run = jax.jit(
        shard_map.shard_map(
            ring,
            mesh=mesh,
            in_specs=partition,
            out_specs=(partition, P('x')),
            check_vma=False,
        )
    )

    x = jax.random.uniform(
        jax.random.key(0), (8, 128 * num_devices), dtype=jnp.float32
    )
    x = jax.device_put(x, sharding)
    out, counts = jax.block_until_ready(run(x))

    # Device d receives the block of device d - 1.
    expected = np.roll(np.asarray(x), 128, axis=1)
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(counts, np.tile([2, 0], num_devices))
    if detect_races:
      self.assertFalse(mosaic_interpret.races.races_found)

  def test_nondecrementing_wait_on_remote_signal(self):
    # Each device raises a flag on its right neighbour's REGULAR semaphore and
    # polls its own flag twice before consuming it.
    num_devices = 4
    mesh = jtu.create_mesh((num_devices,), ('x',))

    def kernel(o_ref, sem):
      my_id = lax.axis_index('x')
      right_neighbor = lax.rem(my_id + 1, num_devices)
      pl.semaphore_signal(sem, my_id + 1, device_id=(right_neighbor,))
      left_id = lax.rem(my_id + num_devices - 1, num_devices)
      pl.semaphore_wait(sem, left_id + 1, decrement=False)
      pl.semaphore_wait(sem, 1, decrement=False)
      o_ref[0] = pl.semaphore_read(sem)
      pl.semaphore_wait(sem, left_id + 1)
      o_ref[1] = pl.semaphore_read(sem)

    flags = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((2,), jnp.int32),
        out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),
        scratch_shapes=[pltpu.SemaphoreType.REGULAR],
        interpret=pltpu.InterpretParams(
            allow_non_decrementing_semaphore_wait=True,
        ),
    )
    run = jax.jit(
        shard_map.shard_map(
            flags, mesh=mesh, in_specs=(), out_specs=P('x'), check_vma=False
        )
    )
    counts = jax.block_until_ready(run())
    left_ids = (np.arange(num_devices) - 1) % num_devices
    expected = np.stack([left_ids + 1, np.zeros(num_devices)], axis=1)
    np.testing.assert_array_equal(counts, expected.reshape(-1))


@jtu.thread_unsafe_test_class()
class InterpretSemaphoreReadLockOrderTest(
    test_util.InterpretDistributedTestCase
):
  """A regression test of the 0.8.2, 0.9.1 and 0.9.2 series' patch 0002.

  There, `pl.semaphore_read` took the shared memory's lock while holding the
  semaphore's, and the check at kernel exit that no semaphore count is left
  (`SharedMemory.get_sempahores_with_nonzero_count`) takes them in the other
  order: a device reading a semaphore while another finished its kernel could
  block both for ever (seen once in CI, in
  `test_nondecrementing_wait_on_remote_signal`). The interleaving is rare, so
  the test makes many kernel exits meet many reads, with threads switched as
  often as Python can; it is not exported upstream, whose interpreter takes
  the two locks in one order.
  """

  def test_read_while_other_devices_exit(self):
    num_devices = 4
    num_sems = 64
    num_reads = 40
    mesh = jtu.create_mesh((num_devices,), ('x',))

    def kernel(o_ref, start_sem, sems):
      my_id = lax.axis_index('x')

      @pl.when(my_id == 0)
      def _():
        for device in range(1, num_devices):
          pl.semaphore_signal(start_sem, 1, device_id=(device,))

        def body(i, total):
          return total + pl.semaphore_read(sems.at[(i * 37) % num_sems]) + 1

        o_ref[0] = lax.fori_loop(0, num_reads, body, 0)

      @pl.when(my_id != 0)
      def _():
        pl.semaphore_wait(start_sem, 1)
        o_ref[0] = my_id

    reads = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((1,), jnp.int32),
        out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),
        scratch_shapes=[
            pltpu.SemaphoreType.REGULAR,
            pltpu.SemaphoreType.REGULAR((num_sems,)),
        ],
        interpret=pltpu.InterpretParams(),
    )
    run = jax.jit(
        shard_map.shard_map(
            reads, mesh=mesh, in_specs=(), out_specs=P('x'), check_vma=False
        )
    )
    # Device 0 reads counts that stay 0, once per loop step.
    expected = np.array([num_reads, 1, 2, 3])
    self.addCleanup(sys.setswitchinterval, sys.getswitchinterval())
    sys.setswitchinterval(1e-6)
    for _ in range(100):
      np.testing.assert_array_equal(jax.block_until_ready(run()), expected)


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
