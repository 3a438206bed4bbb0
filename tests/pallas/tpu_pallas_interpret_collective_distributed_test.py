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

"""Tests for `run_scoped` with `collective_axes` across devices.

To work around https://github.com/jax-ml/jax/issues/25671 , this file
contains only tests that use shard_map.
"""

from absl.testing import absltest
from absl.testing import parameterized
import jax
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
class InterpretCollectiveRunScopedDistributedTest(
    test_util.InterpretDistributedTestCase
):

  @parameterized.product(
      dma_execution_mode=['eager', 'on_wait'], detect_races=[False, True]
  )
  def test_each_device_has_its_own_collective_allocation(
      self, dma_execution_mode, detect_races
  ):
    # 2 devices x 2 cores: core 1 of each device fills a collective buffer
    # with its device's block, filled with d + 1 on device d. Both cores of a
    # device must see their own device's block, and only that.
    num_devices, num_cores = 2, 2
    device_mesh = jtu.create_mesh((num_devices,), ('x',))

    @test_util.kernel(
        out_type=jax.ShapeDtypeStruct((num_cores, 8, 128), jnp.float32),
        mesh=test_util.tensorcore_mesh(axis_name='core', num_cores=num_cores),
        interpret=test_util.interpret_params(
            allow_collective_axes_in_run_scoped=True,
            dma_execution_mode=dma_execution_mode,
            detect_races=detect_races,
            on_race='warn',
        ),
    )
    def kernel(x_ref, o_ref):
      core = jax.lax.axis_index('core')

      def body(buffer_ref, sem):
        @pl.when(core == 1)
        def _():
          pltpu.sync_copy(x_ref, buffer_ref)
          pl.semaphore_signal(sem, 1, core_index=0)

        @pl.when(core == 0)
        def _():
          pl.semaphore_wait(sem, 1)

        pltpu.sync_copy(buffer_ref, o_ref.at[core])

      pl.run_scoped(
          body,
          pltpu.VMEM((8, 128), jnp.float32),
          pltpu.SemaphoreType.REGULAR,
          collective_axes='core',
      )

    x = jnp.repeat(jnp.array([1.0, 2.0], jnp.float32), 8 * 128).reshape(16, 128)
    x = jax.device_put(x, jax.sharding.NamedSharding(device_mesh, P('x')))
    out = jax.block_until_ready(jax.jit(shard_map.shard_map(
        kernel, mesh=device_mesh, in_specs=P('x'), out_specs=P('x'),
        check_vma=False))(x))
    expected = np.repeat(np.array([1.0, 2.0], np.float32), num_cores)
    np.testing.assert_array_equal(
        out, np.broadcast_to(expected[:, None, None], out.shape)
    )
    if detect_races:
      self.assertFalse(mosaic_interpret.races.races_found)

  def test_collective_axes_naming_device_axis_raises(self):
    device_mesh = jtu.create_mesh((2,), ('x',))

    @test_util.kernel(
        out_type=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        mesh=test_util.tensorcore_mesh(axis_name='core', num_cores=2),
        interpret=pltpu.InterpretParams(
            allow_collective_axes_in_run_scoped=True
        ),
    )
    def kernel(x_ref, o_ref):
      def body(buffer_ref):
        pltpu.sync_copy(x_ref, buffer_ref)
        pltpu.sync_copy(buffer_ref, o_ref)

      pl.run_scoped(
          body, pltpu.VMEM((8, 128), jnp.float32), collective_axes='x'
      )

    run = jax.jit(shard_map.shard_map(
        kernel, mesh=device_mesh, in_specs=P('x'), out_specs=P('x'),
        check_vma=False))
    with self.assertRaisesRegex(
        NotImplementedError,
        r"'x' is a device axis\. Devices do not share memory.* The available"
        r" core axes are \('core',\)",
    ):
      run(jnp.ones((2 * 8, 128), jnp.float32))


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
