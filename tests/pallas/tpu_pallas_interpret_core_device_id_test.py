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

"""Tests of a `device_id` that names the core axis, in TPU interpret mode.

In a kernel over a `pltpu.TensorCoreMesh`, Mosaic's lowering sends a signal
or DMA whose `device_id` dict names the mesh's core axis to that core.

To work around https://github.com/jax-ml/jax/issues/25671 , this file
contains only tests that do not use shard_map.
"""

from absl.testing import absltest
from absl.testing import parameterized
import jax
from jax._src import test_util as jtu
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
import jax.numpy as jnp
import numpy as np
import tpu_interpret_test_util as test_util


jax.config.parse_flags_with_absl()


# TODO(jburnim): Figure out how to safely run different instance of TPU
# interpret mode in parallel, and then remove this decorator.
@jtu.thread_unsafe_test_class()
class InterpretCoreDeviceIdTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 10, 0):
      self.skipTest(
          'jax 0.9.x and older: their series (maintenance-only) do not route'
          ' a device_id naming the core axis'
      )
    # Older jax releases: end.

  def _two_core_kernel(self, out_type, *scratch_types):
    """Returns `pl.kernel` over 2 TensorCores with axis 'core'."""
    return test_util.kernel(
        out_type=out_type,
        mesh=test_util.tensorcore_mesh(axis_name='core', num_cores=2),
        scratch_types=scratch_types,
        interpret=test_util.interpret_params(),
    )

  @parameterized.named_parameters(('signal', False), ('dma', True))
  def test_signal_and_dma_reach_the_core_named(self, dma):
    # Core c sends 10 * c + 1 to core 1 - c, named by the core axis.
    @self._two_core_kernel(
        jax.ShapeDtypeStruct((2, 8, 128), jnp.int32),
        pltpu.VMEM((8, 128), jnp.int32),
        pltpu.VMEM((8, 128), jnp.int32),
        pltpu.SemaphoreType.REGULAR,
        pltpu.SemaphoreType.DMA,
        pltpu.SemaphoreType.DMA,
    )
    def kernel(o_ref, src_ref, dst_ref, sem, send_sem, recv_sem):
      core = jax.lax.axis_index('core')
      value = 10 * core + 1
      device_id = {'core': 1 - core}
      if dma:
        src_ref[...] = jnp.full((8, 128), value, jnp.int32)
        copy = pltpu.make_async_remote_copy(
            src_ref, dst_ref, send_sem, recv_sem, device_id=device_id
        )
        copy.start()
        copy.wait()
      else:
        pl.semaphore_signal(sem, value, device_id=device_id)
        peer_value = 10 * (1 - core) + 1
        pl.semaphore_wait(sem, peer_value)
        dst_ref[...] = jnp.full((8, 128), peer_value, jnp.int32)
      pltpu.sync_copy(dst_ref, o_ref.at[core])

    expected = 10 * (1 - np.arange(2)) + 1
    np.testing.assert_array_equal(
        jax.block_until_ready(kernel()),
        np.broadcast_to(expected[:, None, None], (2, 8, 128)),
    )

  def test_every_core_signals_every_core(self):
    # As in upstream's hardware test `test_can_signal_cores`, every core
    # signals every core by {'core': i}: core i gets i + 1 from each of the 2
    # cores, 2 * (i + 1) in all, and its wait for that leaves 0. Signals that
    # reached the calling core instead would leave core 0 one and never wake
    # core 1 (its 3 < 4: the hang guard fails the test).
    @self._two_core_kernel(
        jax.ShapeDtypeStruct((2, 8, 128), jnp.int32),
        pltpu.VMEM((8, 128), jnp.int32),
        pltpu.SemaphoreType.REGULAR,
    )
    def kernel(o_ref, vmem_ref, sem):
      core = jax.lax.axis_index('core')
      for i in range(2):
        pl.semaphore_signal(sem, i + 1, device_id={'core': i})
      pl.semaphore_wait(sem, 2 * (core + 1))
      vmem_ref[...] = jnp.full((8, 128), pl.semaphore_read(sem), jnp.int32)
      pltpu.sync_copy(vmem_ref, o_ref.at[core])

    np.testing.assert_array_equal(
        jax.block_until_ready(kernel()), np.zeros((2, 8, 128), np.int32)
    )

  @parameterized.named_parameters(
      ('core_index_and_core_axis', {'core': 1}, 1,
       'Cannot specify both core_index and a core axis in device_id'),
      ('unknown_axis', {'rows': 1}, None,
       r"Unrecognized axes in device_id: \{'rows'"),
  )
  def test_device_id_errors(self, device_id, core_index, regex):
    @self._two_core_kernel(
        jax.ShapeDtypeStruct((2, 8, 128), jnp.int32),
        pltpu.VMEM((8, 128), jnp.int32),
        pltpu.SemaphoreType.REGULAR,
    )
    def kernel(o_ref, vmem_ref, sem):
      pl.semaphore_signal(sem, 1, device_id=device_id, core_index=core_index)
      vmem_ref[...] = jnp.zeros((8, 128), jnp.int32)
      pltpu.sync_copy(vmem_ref, o_ref.at[jax.lax.axis_index('core')])

    with self.assertRaisesRegex(ValueError, regex):
      kernel()


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
