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

"""Tests of Mosaic's `disable_bounds_checks` in TPU interpret mode.

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
class InterpretDisableBoundsChecksTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 10, 0):
      self.skipTest(
          'jax 0.9.x and older: their series (maintenance-only) have no'
          ' disable_bounds_checks patch'
      )
    # Older jax releases: end.

  def _read_past_the_end(self, x, disable_bounds_checks, **kwargs):
    """Reads rows [0, 16) of `x`, of 8 rows, in a kernel."""

    def kernel(x_ref, o_ref):
      # A start that is not static: jax checks static slices when tracing.
      start = pl.program_id(0) * 8
      o_ref[...] = x_ref[pl.ds(start, 16), :]

    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((16, 128), x.dtype),
        grid=(1,),
        in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        compiler_params=pltpu.CompilerParams(
            disable_bounds_checks=disable_bounds_checks),
        interpret=test_util.interpret_params(on_race='warn', **kwargs),
    )(x)

  def test_disable_bounds_checks_reads_uninitialized_values_past_the_end(self):
    x = np.arange(8 * 128, dtype=np.float32).reshape(8, 128)
    result = self._read_past_the_end(x, disable_bounds_checks=True)
    np.testing.assert_array_equal(result[:8], x)
    # `InterpretParams.uninitialized_memory` is 'nan' by default.
    self.assertTrue(np.all(np.isnan(result[8:])))

  @parameterized.parameters(jnp.float32, jnp.int32)
  def test_disable_bounds_checks_follows_uninitialized_memory(self, dtype):
    x = np.arange(8 * 128).astype(dtype).reshape(8, 128)
    result = self._read_past_the_end(
        x, disable_bounds_checks=True, uninitialized_memory='zero')
    np.testing.assert_array_equal(
        result, np.concatenate([x, np.zeros_like(x)]))

  def test_read_past_the_end_raises_without_disable_bounds_checks(self):
    x = np.arange(8 * 128, dtype=np.float32).reshape(8, 128)
    with self.assertRaisesRegex(Exception, 'Out-of-bounds read'):
      self._read_past_the_end(x, disable_bounds_checks=False)
    test_util.reset_after_failure()


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
