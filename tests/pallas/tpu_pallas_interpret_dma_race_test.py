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

"""Tests of race detection between a DMA's start and its wait.

On a TPU a DMA may copy at any time between its start and its wait, so a
kernel that reads the destination (or writes the source) in between, or never
waits, races with the DMA, in either `dma_execution_mode`.

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
from tpu_interpret_test_util import mosaic_interpret


jax.config.parse_flags_with_absl()


# TODO(jburnim): Figure out how to safely run different instance of TPU
# interpret mode in parallel, and then remove this decorator.
@jtu.thread_unsafe_test_class()
class InterpretDmaRaceTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if not hasattr(getattr(mosaic_interpret, 'DMA', None),
                   'record_accesses_at_start'):
      self.skipTest('jax 0.10.x and older: their series have no such patch')
    # Older jax releases: end.

  def _run(self, kernel, dma_execution_mode):
    x = np.arange(8 * 128, dtype=np.float32).reshape(8, 128)
    call = pl.pallas_call(
        kernel,
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        scratch_shapes=[
            pltpu.VMEM((8, 128), jnp.float32),
            pltpu.VMEM((8, 128), jnp.float32),
            pltpu.SemaphoreType.DMA,
        ],
        interpret=test_util.interpret_params(
            detect_races=True,
            on_race='warn',
            dma_execution_mode=dma_execution_mode,
        ),
    )
    return x, jax.block_until_ready(call(jnp.asarray(x)))

  @parameterized.parameters('on_wait', 'eager')
  def test_read_of_destination_before_wait_is_a_race(self, dma_execution_mode):
    def kernel(x_hbm, o_hbm, buf, out_buf, sem):
      copy = pltpu.make_async_copy(x_hbm, buf, sem)
      copy.start()
      out_buf[...] = buf[...]  # Before the wait: races with the copy.
      copy.wait()
      pltpu.sync_copy(out_buf, o_hbm)

    self._run(kernel, dma_execution_mode)
    self.assertTrue(mosaic_interpret.races.races_found)

  @parameterized.parameters('on_wait', 'eager')
  def test_read_of_destination_never_waited_for_is_a_race(
      self, dma_execution_mode
  ):
    def kernel(x_hbm, o_hbm, buf, out_buf, sem):
      pltpu.make_async_copy(x_hbm, buf, sem).start()  # Never waited for.
      out_buf[...] = buf[...]
      pltpu.sync_copy(out_buf, o_hbm)

    self._run(kernel, dma_execution_mode)
    self.assertTrue(mosaic_interpret.races.races_found)

  @parameterized.parameters('on_wait', 'eager')
  def test_write_of_source_before_wait_is_a_race(self, dma_execution_mode):
    def kernel(x_hbm, o_hbm, buf, out_buf, sem):
      pltpu.sync_copy(x_hbm, buf)
      copy = pltpu.make_async_copy(buf, out_buf, sem)
      copy.start()
      buf[...] = jnp.zeros_like(buf)  # Before the wait: races with the copy.
      copy.wait()
      pltpu.sync_copy(out_buf, o_hbm)

    self._run(kernel, dma_execution_mode)
    self.assertTrue(mosaic_interpret.races.races_found)

  @parameterized.parameters('on_wait', 'eager')
  def test_read_of_destination_after_wait_is_no_race(self, dma_execution_mode):
    def kernel(x_hbm, o_hbm, buf, out_buf, sem):
      copy = pltpu.make_async_copy(x_hbm, buf, sem)
      copy.start()
      copy.wait()
      out_buf[...] = buf[...] + 1.0
      pltpu.sync_copy(out_buf, o_hbm)

    x, out = self._run(kernel, dma_execution_mode)
    self.assertFalse(mosaic_interpret.races.races_found)
    np.testing.assert_array_equal(out, x + 1.0)


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
