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

"""Tests for `pl.select_ref` in remote DMAs in TPU interpret mode.

To work around https://github.com/jax-ml/jax/issues/25671 , this file
contains only tests that use shard_map.
"""

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
class InterpretSelectRefDistributedTest(
    test_util.InterpretDistributedTestCase
):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 11, 0):
      self.skipTest(
          'jax 0.10.x and older: their series have no pl.select_ref patch'
          ' (0021)'
      )
    # Older jax releases: end.

  @parameterized.product(
      dma_execution_mode=['eager', 'on_wait'],
      detect_races=[True, False],
  )
  def test_select_ref_remote_copy_ring(self, dma_execution_mode, detect_races):
    # In step i, each device sends its input block (i + my_id) % 3 (an index
    # that differs between devices) to row block i of its right neighbour's
    # output, with send and receive semaphores i % 2 of two each.
    num_devices = 4
    num_steps = 4
    mesh = jtu.create_mesh((num_devices,), ('x',))

    def kernel(x0_ref, x1_ref, x2_ref, o_ref, send_sems, recv_sems):
      my_id = lax.axis_index('x')
      left_neighbor = lax.rem(my_id + num_devices - 1, num_devices)
      right_neighbor = lax.rem(my_id + 1, num_devices)

      # Tell the left neighbour (which sends to this device) that this device
      # runs, and wait until the right one (which it sends to) does.
      barrier_sem = pltpu.get_barrier_semaphore()
      pl.semaphore_signal(barrier_sem, device_id=(left_neighbor,))
      pl.semaphore_wait(barrier_sem, 1)

      @pl.loop(0, num_steps)
      def _(i):
        copy = pltpu.make_async_remote_copy(
            src_ref=pl.select_ref((i + my_id) % 3, x0_ref, x1_ref, x2_ref),
            dst_ref=o_ref.at[pl.ds(8 * i, 8)],
            send_sem=pl.select_ref(i % 2, send_sems.at[0], send_sems.at[1]),
            recv_sem=pl.select_ref(i % 2, recv_sems.at[0], recv_sems.at[1]),
            device_id=(right_neighbor,),
        )
        copy.start()
        copy.wait()

    in_spec = pl.BlockSpec(memory_space=pl.ANY)
    ring = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((8 * num_steps, 128), jnp.float32),
        in_specs=[in_spec] * 3,
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.SemaphoreType.DMA((2,))] * 2,
        compiler_params=pltpu.CompilerParams(collective_id=3),
        interpret=test_util.interpret_params(
            dma_execution_mode=dma_execution_mode, detect_races=detect_races,
            on_race='warn'
        ),
    )
    run = jax.jit(
        shard_map.shard_map(
            ring,
            mesh=mesh,
            in_specs=(P('x'),) * 3,
            out_specs=P('x'),
            check_vma=False,
        )
    )

    rng = np.random.default_rng(7)
    xs = [
        rng.normal(size=(8 * num_devices, 128)).astype(np.float32)
        for _ in range(3)
    ]
    out = np.asarray(jax.block_until_ready(run(*xs)))

    # Device d receives, in row block i, block (i + d - 1) % 3 of device
    # d - 1.
    for d in range(num_devices):
      src = (d - 1) % num_devices
      for i in range(num_steps):
        expected = xs[(i + src) % 3][8 * src : 8 * (src + 1)]
        np.testing.assert_array_equal(
            out[8 * num_steps * d + 8 * i : 8 * num_steps * d + 8 * (i + 1)],
            expected,
        )
    if detect_races:
      self.assertFalse(mosaic_interpret.races.races_found)

  @parameterized.parameters(0, 1, 5)
  def test_select_ref_remote_destination_by_smem_index(self, idx):
    # Each device sends its block to output `idx` (one of two; an index
    # outside [0, 2) selects the last) of its left neighbour.
    num_devices = 4
    mesh = jtu.create_mesh((num_devices,), ('x',))

    def kernel(idx_ref, x_ref, o0_ref, o1_ref, send_sem, recv_sem):
      my_id = lax.axis_index('x')
      left_neighbor = lax.rem(my_id + num_devices - 1, num_devices)
      o0_ref[...] = jnp.zeros_like(o0_ref)
      o1_ref[...] = jnp.zeros_like(o1_ref)
      right_neighbor = lax.rem(my_id + 1, num_devices)

      # Tell the right neighbour (which sends to this device) that this
      # device's outputs are zeroed, and wait until the left one (which it
      # sends to) is ready.
      barrier_sem = pltpu.get_barrier_semaphore()
      pl.semaphore_signal(barrier_sem, device_id=(right_neighbor,))
      pl.semaphore_wait(barrier_sem, 1)

      copy = pltpu.make_async_remote_copy(
          src_ref=x_ref,
          dst_ref=pl.select_ref(idx_ref[0], o0_ref, o1_ref),
          send_sem=send_sem,
          recv_sem=recv_sem,
          device_id=(left_neighbor,),
      )
      copy.start()
      copy.wait()

    vmem = pl.BlockSpec(memory_space=pltpu.VMEM)
    send = pl.pallas_call(
        kernel,
        out_shape=(jax.ShapeDtypeStruct((8, 128), jnp.int32),) * 2,
        in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), vmem],
        out_specs=(vmem, vmem),
        scratch_shapes=[pltpu.SemaphoreType.DMA] * 2,
        compiler_params=pltpu.CompilerParams(collective_id=5),
        interpret=test_util.interpret_params(),
    )
    run = jax.jit(
        shard_map.shard_map(
            send,
            mesh=mesh,
            in_specs=(P(), P('x')),
            out_specs=(P('x'), P('x')),
            check_vma=False,
        )
    )

    x = np.arange(8 * num_devices * 128, dtype=np.int32).reshape(-1, 128)
    o0, o1 = jax.block_until_ready(run(np.array([idx], np.int32), x))

    # Device d receives the block of device d + 1.
    expected = np.roll(x, -8, axis=0)
    zeros = np.zeros_like(x)
    np.testing.assert_array_equal(o0, expected if idx == 0 else zeros)
    np.testing.assert_array_equal(o1, zeros if idx == 0 else expected)


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
