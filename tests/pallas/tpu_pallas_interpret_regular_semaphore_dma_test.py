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

"""Tests of DMAs that signal REGULAR semaphores in TPU interpret mode.

On TPU v6 and newer a DMA may signal a REGULAR semaphore, which then counts
completed DMAs (upstream's `test_dma_with_regular_semaphore` waits on one
with `pl.semaphore_wait(sem)` after each copy); a DMA semaphore counts the
bytes copied. The expected values are the inputs (numpy) and hand-derived
counts.

To work around https://github.com/jax-ml/jax/issues/25671 , this file
contains only tests that do not use shard_map.
"""

from absl.testing import absltest
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
class InterpretRegularSemaphoreDmaTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 11, 0):
      self.skipTest(
          'jax 0.10.x and older: their series have no regular-semaphore DMA'
          ' patch'
      )
    # Older jax releases: end.

  def _run_hbm_kernel(self, kernel, x, out_shape, out_specs):
    return pl.pallas_call(
        kernel,
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=out_specs,
        out_shape=out_shape,
        interpret=test_util.interpret_params(),
    )(x)

  def test_copy_in_and_out_waiting_on_a_regular_semaphore(self):
    # Upstream's test_dma_with_regular_semaphore, with a value changed in
    # VMEM: each wait for 1 waits for the one DMA before it.
    def kernel(x_hbm_ref, y_hbm_ref):
      def body(x_ref, y_ref, sem):
        pltpu.async_copy(x_hbm_ref, x_ref, sem)
        pl.semaphore_wait(sem)
        y_ref[...] = x_ref[...] * 2 + 1
        pltpu.async_copy(y_ref, y_hbm_ref, sem)
        pl.semaphore_wait(sem)

      pl.run_scoped(
          body,
          pltpu.VMEM((8, 128), jnp.float32),
          pltpu.VMEM((8, 128), jnp.float32),
          pltpu.SemaphoreType.REGULAR,
      )

    x = np.arange(8 * 128, dtype=np.float32).reshape(8, 128)
    y = self._run_hbm_kernel(
        kernel, x, jax.ShapeDtypeStruct((8, 128), jnp.float32),
        pl.BlockSpec(memory_space=pl.ANY))
    np.testing.assert_array_equal(y, x * 2 + 1)

  def test_regular_semaphore_counts_completed_dmas(self):
    # Three DMAs signal one semaphore: a wait for 3 waits for all of them,
    # and leaves the count at 0 (a DMA semaphore would count bytes).
    def kernel(x_hbm_ref, o_ref, counts_ref):
      def body(x_ref, sem):
        for i in range(3):
          pltpu.async_copy(x_hbm_ref.at[i], x_ref.at[i], sem)
        pl.semaphore_wait(sem, 3)
        counts_ref[0] = pl.semaphore_read(sem)
        o_ref[...] = x_ref[...]

      pl.run_scoped(
          body,
          pltpu.VMEM((3, 8, 128), jnp.float32),
          pltpu.SemaphoreType.REGULAR,
      )

    x = np.arange(3 * 8 * 128, dtype=np.float32).reshape(3, 8, 128)
    out, counts = self._run_hbm_kernel(
        kernel, x,
        (jax.ShapeDtypeStruct((3, 8, 128), jnp.float32),
         jax.ShapeDtypeStruct((1,), jnp.int32)),
        (pl.BlockSpec(memory_space=pltpu.VMEM),
         pl.BlockSpec(memory_space=pltpu.SMEM)))
    np.testing.assert_array_equal(out, x)
    np.testing.assert_array_equal(counts, [0])

  def test_dma_semaphore_still_counts_bytes(self):
    # The same copy with a DMA semaphore: waited with `.wait()`, by its size.
    def kernel(x_hbm_ref, o_ref, counts_ref):
      def body(x_ref, sem):
        copy = pltpu.make_async_copy(x_hbm_ref, x_ref, sem)
        copy.start()
        copy.wait()
        counts_ref[0] = pl.semaphore_read(sem)
        o_ref[...] = x_ref[...]

      pl.run_scoped(
          body,
          pltpu.VMEM((8, 128), jnp.float32),
          pltpu.SemaphoreType.DMA,
      )

    x = np.arange(8 * 128, dtype=np.float32).reshape(8, 128)
    out, counts = self._run_hbm_kernel(
        kernel, x,
        (jax.ShapeDtypeStruct((8, 128), jnp.float32),
         jax.ShapeDtypeStruct((1,), jnp.int32)),
        (pl.BlockSpec(memory_space=pltpu.VMEM),
         pl.BlockSpec(memory_space=pltpu.SMEM)))
    np.testing.assert_array_equal(out, x)
    np.testing.assert_array_equal(counts, [0])


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
