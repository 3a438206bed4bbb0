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

"""Tests that TPU interpret mode rejects matmuls of unsigned integers.

To work around https://github.com/jax-ml/jax/issues/25671 , this file
contains only tests that do not use shard_map.
"""

from absl.testing import absltest
from absl.testing import parameterized
import jax
from jax._src import test_util as jtu
from jax.experimental import pallas as pl
import jax.numpy as jnp
import numpy as np
import tpu_interpret_test_util as test_util


jax.config.parse_flags_with_absl()


# TODO(jburnim): Figure out how to safely run different instance of TPU
# interpret mode in parallel, and then remove this decorator.
@jtu.thread_unsafe_test_class()
class InterpretUnsignedMatmulTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 10, 0):
      self.skipTest(
          'jax 0.9.x and older: their series (maintenance-only) have no'
          ' unsigned matmul patch'
      )
    # Older jax releases: end.

  def _matmul(self, lhs, rhs, out_dtype):
    def kernel(lhs_ref, rhs_ref, o_ref):
      o_ref[...] = jax.lax.dot(
          lhs_ref[...], rhs_ref[...], preferred_element_type=out_dtype)

    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((lhs.shape[0], rhs.shape[1]),
                                       out_dtype),
        interpret=test_util.interpret_params(),
    )(lhs, rhs)

  @parameterized.parameters(jnp.uint8, jnp.uint16, jnp.uint32)
  def test_unsigned_matmul_raises_as_mosaic_does(self, dtype):
    lhs = np.ones((8, 256), dtype)
    rhs = np.ones((256, 128), dtype)
    with self.assertRaisesRegex(
        NotImplementedError,
        f'Unsigned integer dtype {np.dtype(dtype).name} is not supported for'
        r' dot_general \(matmul\)'):
      self._matmul(lhs, rhs, jnp.int32)

  def test_unsigned_operand_of_mixed_matmul_raises(self):
    lhs = np.ones((8, 256), np.int8)
    rhs = np.ones((256, 128), np.uint8)
    with self.assertRaisesRegex(NotImplementedError, 'Unsigned integer dtype'):
      self._matmul(lhs, rhs, jnp.int32)

  def test_signed_matmul_runs(self):
    rng = np.random.default_rng(0)
    lhs = rng.integers(-128, 128, (8, 256)).astype(np.int8)
    rhs = rng.integers(-128, 128, (256, 128)).astype(np.int8)
    result = self._matmul(lhs, rhs, jnp.int32)
    np.testing.assert_array_equal(
        result, lhs.astype(np.int64) @ rhs.astype(np.int64))


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
