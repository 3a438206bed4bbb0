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

"""Tests of a mesh `device_id` with the wrong number of coordinates.

Mosaic's lowering (`device_id_to_logical` in `jax/_src/pallas/primitives.py`)
rejects a device id of mesh coordinates (`DeviceIdType.MESH`, the default)
whose number is not the number of mesh axes with a `ValueError`; TPU
interpret mode does too.
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
class InterpretDeviceIdLengthTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 10, 0):
      self.skipTest('jax 0.9.x and older: their series have no such patch')
    # Older jax releases: end.

  def _call(self, kernel, *scratch_shapes):
    x = jnp.arange(8 * 128, dtype=jnp.int32).reshape(8, 128)
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=scratch_shapes,
        interpret=test_util.interpret_params(),
    )(x)

  @parameterized.named_parameters(
      ('two_ids', (0, 0), 2), ('three_ids', (0, 0, 0), 3)
  )
  def test_remote_copy(self, device_id, ids):
    # Outside `shard_map` the mesh has no axes: a DMA to device (0, 0) is
    # rejected when the kernel is traced, before any copy.
    def kernel(x_ref, o_ref, sems):
      copy = pltpu.make_async_remote_copy(
          x_ref, o_ref, sems.at[0], sems.at[1], device_id=device_id
      )
      copy.start()
      copy.wait()

    with self.assertRaisesRegex(
        ValueError,
        'Number of device ids must match the number of mesh axes, but got'
        f' {ids} ids for a 0D mesh.',
    ):
      self._call(kernel, pltpu.SemaphoreType.DMA((2,)))

  def test_semaphore_signal(self):
    def kernel(x_ref, o_ref, sem):
      pl.semaphore_signal(sem, 1, device_id=(0, 0))
      pl.semaphore_wait(sem, 1)
      pltpu.sync_copy(x_ref, o_ref)

    with self.assertRaisesRegex(ValueError, 'but got 2 ids for a 0D mesh.'):
      self._call(kernel, pltpu.SemaphoreType.REGULAR)

  def test_no_device_id_is_local(self):
    # The same copy without a device id copies locally.
    def kernel(x_ref, o_ref, sems):
      copy = pltpu.make_async_copy(x_ref, o_ref, sems.at[0])
      copy.start()
      copy.wait()

    out = self._call(kernel, pltpu.SemaphoreType.DMA((2,)))
    np.testing.assert_array_equal(
        out, np.arange(8 * 128, dtype=np.int32).reshape(8, 128)
    )


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
