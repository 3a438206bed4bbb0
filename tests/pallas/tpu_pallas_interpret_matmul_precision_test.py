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

"""Tests of `InterpretParams.matmul_precision` in TPU interpret mode.

With `matmul_precision="tpu"`, a float32 matmul at the default precision
multiplies its operands rounded to bfloat16 and sums the products in the
order of a TPU v5e's MXU, as measured on the chip: in passes of 128
contraction indices, each 8 neighbouring products as a tree (pairs exact,
the two other levels rounded to float32), those sums and then the passes
added in order in float32.

To work around https://github.com/jax-ml/jax/issues/25671 , this file
contains only tests that do not use shard_map.
"""

import functools

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
class InterpretMatmulPrecisionTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 10, 0):
      self.skipTest('jax 0.9.x and older: their series have no such option')
    # Older jax releases: end.

  def _precision_operands(self, dtype=np.float32):
    """(8, 128) and (128, 128) operands that bfloat16 cannot hold exactly.

    Each is a small integer times (1 + a multiple of 2**-13 or 2**-12), so
    every product of the operands rounded to bfloat16 (8 significant bits)
    and every sum of those products is exact in float32: a matmul of the
    rounded operands has one right result, whatever the order of the sums.
    """
    i = np.arange(8 * 128).reshape(8, 128)
    j = np.arange(128 * 128).reshape(128, 128)
    a = ((i * 7 + 3) % 23 - 11) * (1 + (i % 13) / 8192)
    b = ((j * 5 + 1) % 19 - 9) * (1 + (j % 11) / 4096)
    return a.astype(dtype), b.astype(dtype)

  def _precision_matmul(self, a, b, *, precision=None,
                        preferred_element_type=None, **params):
    out_dtype = preferred_element_type or jnp.result_type(a, b)

    def kernel(a_ref, b_ref, o_ref):
      o_ref[...] = jnp.dot(
          a_ref[...], b_ref[...], precision=precision,
          preferred_element_type=preferred_element_type).astype(o_ref.dtype)

    return np.asarray(pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((a.shape[0], b.shape[1]), out_dtype),
        interpret=pltpu.InterpretParams(**params),
    )(a, b))

  def _bfloat16_rounded_product(self, a, b):
    """The matmul of `a` and `b` rounded to bfloat16, computed by numpy."""
    def rounded(x):
      return x.astype(jnp.bfloat16).astype(np.float64)
    return (rounded(a) @ rounded(b)).astype(np.float32)

  @parameterized.parameters(None, jax.lax.Precision.DEFAULT)
  def test_tpu_matmul_precision_rounds_float32_operands_to_bfloat16(
      self, precision):
    a, b = self._precision_operands()
    expected = self._bfloat16_rounded_product(a, b)
    # The operands need more than bfloat16's bits: the float32 product is
    # another.
    self.assertGreater(
        np.abs(a.astype(np.float64) @ b.astype(np.float64) - expected).max(),
        0.5)
    np.testing.assert_array_equal(
        self._precision_matmul(a, b, precision=precision,
                               matmul_precision='tpu'),
        expected)

  def test_tpu_matmul_precision_rounds_in_a_grid_kernel(self):
    a, b = self._precision_operands()
    a = np.concatenate([a, -a])

    def kernel(a_ref, b_ref, o_ref):
      o_ref[...] = jnp.dot(a_ref[...], b_ref[...],
                           preferred_element_type=jnp.float32)

    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32),
        grid=(2,),
        in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0)),
                  pl.BlockSpec((128, 128), lambda i: (0, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
        interpret=pltpu.InterpretParams(matmul_precision='tpu'),
    )(a, b)
    np.testing.assert_array_equal(out, self._bfloat16_rounded_product(a, b))

  @parameterized.parameters(jax.lax.Precision.HIGH, jax.lax.Precision.HIGHEST)
  def test_tpu_matmul_precision_keeps_float32_at_higher_precisions(
      self, precision):
    a, b = self._precision_operands()
    np.testing.assert_array_equal(
        self._precision_matmul(a, b, precision=precision,
                               matmul_precision='tpu'),
        self._precision_matmul(a, b, precision=precision))

  def test_tpu_matmul_precision_follows_default_matmul_precision(self):
    a, b = self._precision_operands()
    with jax.default_matmul_precision('highest'):
      got = self._precision_matmul(a, b, matmul_precision='tpu')
    np.testing.assert_array_equal(got, self._precision_matmul(a, b))

  def test_float32_matmul_precision_multiplies_float32_values(self):
    a, b = self._precision_operands()
    got = self._precision_matmul(a, b)
    # float32 sums of 128 products of up to ~100: within 1e-3 of the exact
    # product, where the bfloat16-rounded one is more than 0.5 away.
    np.testing.assert_allclose(
        got, a.astype(np.float64) @ b.astype(np.float64), rtol=0, atol=1e-3)
    self.assertFalse(np.array_equal(got, self._bfloat16_rounded_product(a, b)))

  def test_unknown_matmul_precision_raises(self):
    with self.assertRaisesRegex(
        ValueError, "Unsupported matmul_precision: 'bf16'"):
      pltpu.InterpretParams(matmul_precision='bf16')

  @parameterized.parameters(
      (jnp.bfloat16, jnp.float32), (jnp.int8, jnp.int32),
      (jnp.bfloat16, jnp.bfloat16))
  def test_tpu_matmul_precision_keeps_other_dtypes(self, dtype, out_dtype):
    a, b = self._precision_operands()
    a, b = jnp.asarray(np.round(a), dtype), jnp.asarray(np.round(b), dtype)
    matmul = functools.partial(self._precision_matmul, a, b,
                               preferred_element_type=out_dtype)
    np.testing.assert_array_equal(matmul(matmul_precision='tpu'), matmul())
    np.testing.assert_array_equal(
        matmul(matmul_precision='tpu').astype(np.float64),
        (np.asarray(a, np.float64) @ np.asarray(b, np.float64)).astype(
            out_dtype).astype(np.float64))

  def _mxu_sum(self, a, b):
    """The MXU's sums of a (m, k) x (k, n) product, computed by numpy.

    Products and the pair sums in float64 (exact for bfloat16 values of
    these sizes), each later addition rounded to float32.
    """
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    k = a.shape[1]
    total = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for start in range(0, k, 128):
      partial = np.zeros_like(total)
      for g in range(start, min(start + 128, k), 8):
        products = [a[:, i, None] * b[None, i, :] if i < k
                    else np.zeros(total.shape) for i in range(g, g + 8)]
        pairs = [products[i] + products[i + 1] for i in range(0, 8, 2)]
        quads = [(pairs[i] + pairs[i + 1]).astype(np.float32)
                 for i in range(0, 4, 2)]
        partial = partial + (quads[0] + quads[1])
      total = total + partial
    return total

  def _bfloat16_values(self, shape, seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape, dtype=np.float32)
            .astype(jnp.bfloat16).astype(np.float32))

  @parameterized.parameters(100, 128, 200, 256)
  def test_tpu_matmul_precision_sums_as_the_mxu(self, k):
    a = self._bfloat16_values((8, k), k)
    b = self._bfloat16_values((k, 128), k + 1)
    expected = self._mxu_sum(a, b)
    # The order matters: the correctly rounded sums are other bits.
    exact = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    self.assertGreater(np.mean(exact != expected), 0.2)
    np.testing.assert_array_equal(
        self._precision_matmul(a, b, matmul_precision='tpu'), expected)
    np.testing.assert_array_equal(
        self._precision_matmul(
            a.astype(jnp.bfloat16), b.astype(jnp.bfloat16),
            preferred_element_type=jnp.float32, matmul_precision='tpu'),
        expected)

  def test_tpu_matmul_precision_sums_batched_dot_general_as_the_mxu(self):
    # Batch dimension 0, contraction over dimension 1 of both operands.
    a = self._bfloat16_values((2, 136, 8), 0)
    b = self._bfloat16_values((2, 136, 128), 1)

    def kernel(a_ref, b_ref, o_ref):
      o_ref[...] = jax.lax.dot_general(
          a_ref[...], b_ref[...], (((1,), (1,)), ((0,), (0,))))

    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((2, 8, 128), jnp.float32),
        interpret=pltpu.InterpretParams(matmul_precision='tpu'),
    )(a, b)
    np.testing.assert_array_equal(
        out, np.stack([self._mxu_sum(a[i].T, b[i]) for i in range(2)]))

  def test_tpu_matmul_precision_of_an_empty_contraction(self):
    def kernel(a_ref, b_ref, o_ref):
      o_ref[...] = jnp.dot(a_ref[:, :0], b_ref[:0, :])

    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        interpret=pltpu.InterpretParams(matmul_precision='tpu'),
    )(jnp.ones((8, 128)), jnp.ones((128, 128)))
    np.testing.assert_array_equal(out, np.zeros((8, 128), np.float32))


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
