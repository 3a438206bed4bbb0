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

"""Tests of kernels under `shard_map` with `check_vma=True` in interpret mode.

Inside the kernel, `lax.axis_index` of a device axis varies over that manual
axis and the kernel's constants do not; upstream's hardware test
`test_basic_remote_vmem_dma` computes its peer as `1 - lax.axis_index('x')`.
The expected values are numpy's.

To work around https://github.com/jax-ml/jax/issues/25671 , this file
contains only tests that use shard_map.
"""

from absl.testing import absltest
import jax
from jax import lax
from jax._src import shard_map
from jax._src import test_util as jtu
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
import numpy as np
import tpu_interpret_test_util as test_util

jax.config.parse_flags_with_absl()
jtu.request_cpu_devices(4)

P = jax.sharding.PartitionSpec


@jtu.thread_unsafe_test_class()
class InterpretManualAxesDistributedTest(
    test_util.InterpretDistributedTestCase
):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 10, 0):
      self.skipTest(
          'jax 0.9.x and older: their series have no manual axes patch'
      )
    # Older jax releases: end.

  def _run_on_each_device(self, kernel, x, out_shape, memory_space):
    mesh = jtu.create_mesh((4,), ('x',))
    out_type = jax.ShapeDtypeStruct(
        out_shape,
        x.dtype,
        manual_axis_type=jax.sharding.ManualAxisType(varying={'x'}),
    )
    call = pl.pallas_call(
        kernel,
        out_shape=out_type,
        in_specs=[pl.BlockSpec(memory_space=memory_space)],
        out_specs=pl.BlockSpec(memory_space=memory_space),
        interpret=test_util.interpret_params(),
    )
    run = jax.jit(
        shard_map.shard_map(
            call, mesh=mesh, in_specs=P('x'), out_specs=P('x')
        )
    )
    return np.asarray(jax.block_until_ready(run(x)))

  def test_arithmetic_on_axis_index_under_check_vma(self):
    def kernel(x_ref, o_ref):
      o_ref[...] = x_ref[...] * 10 + (3 - lax.axis_index('x'))

    x = np.arange(4 * 8 * 128, dtype=np.int32).reshape(4 * 8, 128)
    out = self._run_on_each_device(kernel, x, (8, 128), pltpu.VMEM)

    expected = x * 10 + np.repeat(3 - np.arange(4), 8)[:, None]
    np.testing.assert_array_equal(out, expected)

  def test_remote_copy_to_a_peer_computed_from_axis_index(self):
    # As upstream's test_basic_remote_vmem_dma, on 4 devices: devices 0 and 1
    # swap their inputs, and so do devices 2 and 3.
    def kernel(x_ref, y_ref):
      def body(ready_sem, send_sem, recv_sem):
        my_id = lax.axis_index('x')
        peer = my_id + 1 - 2 * (my_id % 2)
        pl.semaphore_signal(ready_sem, device_id=peer)
        pl.semaphore_wait(ready_sem)
        copy = pltpu.async_remote_copy(
            x_ref,
            y_ref,
            send_sem,
            recv_sem,
            peer,
        )
        copy.wait_send()
        copy.wait_recv()

      pl.run_scoped(
          body,
          pltpu.SemaphoreType.REGULAR,
          pltpu.SemaphoreType.DMA,
          pltpu.SemaphoreType.DMA,
      )

    x = np.arange(4 * 8 * 128, dtype=np.float32).reshape(4 * 8, 128)
    out = self._run_on_each_device(kernel, x, (8, 128), pl.ANY)

    expected = x.reshape(4, 8, 128)[[1, 0, 3, 2]].reshape(4 * 8, 128)
    np.testing.assert_array_equal(out, expected)


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
