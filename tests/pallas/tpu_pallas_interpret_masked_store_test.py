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

"""Tests of masked stores to slices of a ref in TPU interpret mode.

A masked store (`pltpu.store(ref, value, mask=mask)`) writes the elements
that `mask` selects; it is out of bounds only if one of those is outside the
ref, in any dimension (upstream's ragged paged attention stores to
`(n, 1, 128)` slices of `(n, k, 128)` buffers). The expected values are
numpy's.

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
class InterpretMaskedStoreTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 10, 0):
      self.skipTest(
          'jax 0.9.x and older: their series have no masked store patch'
      )
    # Older jax releases: end.

  def _store_rows(self, x, start, mask_fn):
    """Stores `x` to rows `start:` of axis 1 of an (8, 4, 128) zero array.

    Args:
      x: float32 (8, n, 128), stored to rows `start` to `start + n - 1`.
      start: The first row, given to the kernel in SMEM.
      mask_fn: Returns the mask of the store for `x`'s shape.

    Returns:
      The (8, 4, 128) float32 array.
    """

    def kernel(start_ref, x_ref, o_ref):
      o_ref[...] = jnp.zeros(o_ref.shape, o_ref.dtype)
      pltpu.store(
          o_ref.at[:, pl.ds(start_ref[0], x.shape[1]), :],
          x_ref[...],
          mask=mask_fn(x.shape),
      )

    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((8, 4, 128), jnp.float32),
        in_specs=[
            pl.BlockSpec(memory_space=pltpu.SMEM),
            pl.BlockSpec(memory_space=pltpu.VMEM),
        ],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        interpret=test_util.interpret_params(),
    )(jnp.array([start], jnp.int32), x)

  @parameterized.parameters(0, 1, 3)
  def test_masked_store_to_one_row_of_a_middle_dimension(self, row):
    x = np.arange(8 * 128, dtype=np.float32).reshape(8, 1, 128) + 1
    lanes = np.arange(128) % 2 == 0

    def even_lanes(shape):
      return jax.lax.broadcasted_iota(jnp.int32, shape, 2) % 2 == 0

    out = self._store_rows(x, row, even_lanes)

    expected = np.zeros((8, 4, 128), np.float32)
    expected[:, row, lanes] = x[:, 0, lanes]
    np.testing.assert_array_equal(out, expected)

  def test_masked_store_past_the_end_masked_out(self):
    # Rows 3 and 4 of 4: only row 3, inside the ref, is selected.
    x = np.arange(8 * 2 * 128, dtype=np.float32).reshape(8, 2, 128) + 1
    out = self._store_rows(
        x, 3, lambda shape: jax.lax.broadcasted_iota(jnp.int32, shape, 1) == 0
    )

    expected = np.zeros((8, 4, 128), np.float32)
    expected[:, 3] = x[:, 0]
    np.testing.assert_array_equal(out, expected)

  def test_masked_store_past_the_end_raises(self):
    x = np.ones((8, 2, 128), np.float32)

    with self.assertRaisesRegex(Exception, 'Out-of-bounds masked swap'):
      jax.block_until_ready(
          self._store_rows(x, 3, lambda shape: jnp.ones(shape, bool))
      )
    test_util.reset_after_failure()


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
