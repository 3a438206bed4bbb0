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

"""Tests that TPU interpret mode rejects masked stores of non-32-bit data.

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
class InterpretNarrowMaskedStoreTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 10, 0):
      self.skipTest(
          'jax 0.9.x and older: their series (maintenance-only) have no'
          ' such patch'
      )
    # Older jax releases: end.

  def _store_even_rows(self, x, *, mask=True):
    """Stores the even rows of `x` (16, 128) over zeros, masked or not."""
    def kernel(x_ref, o_ref):
      o_ref[...] = jnp.zeros(o_ref.shape, o_ref.dtype)
      rows = jax.lax.broadcasted_iota(jnp.int32, x.shape, 0)
      if mask:
        pltpu.store(o_ref, x_ref[...], mask=rows % 2 == 0)
      else:
        o_ref[...] = jnp.where(rows % 2 == 0, x_ref[...], o_ref[...])

    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        interpret=test_util.interpret_params(),
    )(x)

  @parameterized.parameters(jnp.bfloat16, jnp.float16, jnp.int16, jnp.int8,
                            jnp.uint8)
  def test_masked_store_of_narrow_data_raises_as_mosaic_does(self, dtype):
    x = np.ones((16, 128), dtype)
    with self.assertRaisesRegex(NotImplementedError,
                                'masked swap with non-32-bit data'):
      self._store_even_rows(x)

  @parameterized.parameters(jnp.float32, jnp.int32, jnp.uint32)
  def test_masked_store_of_32_bit_data_runs(self, dtype):
    x = np.arange(1, 16 * 128 + 1).reshape(16, 128).astype(dtype)
    expected = np.where(np.arange(16)[:, None] % 2 == 0, x, 0).astype(dtype)
    np.testing.assert_array_equal(self._store_even_rows(x), expected)

  def test_unmasked_store_of_narrow_data_runs(self):
    x = np.arange(1, 16 * 128 + 1).reshape(16, 128).astype(jnp.bfloat16)
    expected = np.where(np.arange(16)[:, None] % 2 == 0, x, 0).astype(
        jnp.bfloat16)
    np.testing.assert_array_equal(self._store_even_rows(x, mask=False),
                                  expected)


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
