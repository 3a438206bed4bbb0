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

"""Tests of `pltpu.stochastic_round` in TPU interpret mode.

The expected values are computed with numpy from every value of the target
dtype (its bit patterns, enumerated): the two neighbours of each input, and,
for random bits spread evenly over `[0, 2**32)`, how many elements round
away from zero.

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
class InterpretStochasticRoundTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 10, 0):
      self.skipTest(
          'jax 0.9.x and older: their series (maintenance-only) have no'
          ' stochastic_round patch'
      )
    # Older jax releases: end.

  def _stochastic_round(self, x, bits, target_dtype):
    def kernel(x_ref, bits_ref, o_ref):
      o_ref[...] = pltpu.stochastic_round(
          x_ref[...], bits_ref[...], target_dtype=target_dtype)

    result = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, target_dtype),
        interpret=test_util.interpret_params(),
    )(x, bits)
    self.assertEqual(result.dtype, jnp.dtype(target_dtype))
    return np.asarray(result).astype(np.float64)

  def _finite_magnitudes(self, dtype):
    """The finite values >= 0 of `dtype`, sorted, from its bit patterns."""
    width = jnp.finfo(dtype).bits
    patterns = np.arange(2**width, dtype=np.uint16 if width == 16 else np.uint8)
    with np.errstate(invalid='ignore'):  # The NaN patterns.
      values = patterns.view(dtype).astype(np.float64)
    return np.unique(values[np.isfinite(values) & (values >= 0)])

  @parameterized.parameters(
      jnp.bfloat16, jnp.float8_e5m2, jnp.float8_e4m3fn,
      jnp.float8_e4m3b11fnuz, jnp.float4_e2m1fn)
  def test_stochastic_round_gives_a_neighbour(self, dtype):
    magnitudes = self._finite_magnitudes(dtype)
    rng = np.random.default_rng(0)
    # Within the dtype's finite range, from its subnormals up.
    x = (rng.choice([-1.0, 1.0], (8, 128))
         * rng.uniform(0, magnitudes[-1], (8, 128))
         * 2.0 ** rng.integers(-20, 1, (8, 128))).astype(np.float32)
    bits = rng.integers(0, 2**32, (8, 128), dtype=np.uint32)

    result = self._stochastic_round(x, bits, dtype)
    ax = np.abs(x.astype(np.float64))
    toward_zero = magnitudes[np.searchsorted(magnitudes, ax, 'right') - 1]
    away = magnitudes[np.searchsorted(magnitudes, ax, 'left')]
    self.assertTrue(
        np.all((np.abs(result) == toward_zero) | (np.abs(result) == away)))
    # The sign of `x`, but for zeros.
    self.assertTrue(np.all((np.sign(result) == np.sign(x)) | (result == 0)))
    # Both neighbours occur (a constant rounding would pass the above).
    inexact = toward_zero != away
    self.assertGreater(np.sum(np.abs(result[inexact]) == away[inexact]), 100)
    self.assertGreater(
        np.sum(np.abs(result[inexact]) == toward_zero[inexact]), 100)

  @parameterized.parameters(
      jnp.bfloat16, jnp.float8_e5m2, jnp.float8_e4m3fn,
      jnp.float8_e4m3b11fnuz, jnp.float4_e2m1fn, jnp.int4)
  def test_stochastic_round_rounds_away_with_the_right_frequency(self, dtype):
    if jnp.issubdtype(dtype, jnp.integer):
      toward_zero, away = 1.0, 2.0
    else:
      magnitudes = self._finite_magnitudes(dtype)
      toward_zero = 1.0
      away = magnitudes[np.searchsorted(magnitudes, 1.0, 'right')]
    # A quarter of the gap above 1 (exact in float32), and its negation.
    x = np.full((8, 128), toward_zero + (away - toward_zero) / 4, np.float32)
    x[4:] *= -1
    # Bits k * 2**14, k = 0, ..., 511 in each half: their low 23 bits, as a
    # fraction of 2**23, are k / 512, below 1/4 for k < 128. Bits 23 to 31
    # (here 2**31 in every other element) are not compared.
    k = np.arange(8 * 128).reshape(8, 128) % 512
    bits = (k * 2**14 + k % 2 * 2**31).astype(np.uint32)

    result = self._stochastic_round(x, bits, dtype)
    expected = np.where(k < 128, away, toward_zero) * np.sign(x)
    np.testing.assert_array_equal(result, expected)
    # The mean of each half is `x`: 1/4 of its elements rounded away.
    np.testing.assert_array_equal(
        result.reshape(2, -1).mean(axis=1), x[[0, 4], 0])

  # How many of 1024 elements a TPU v5e (jax 0.10.2, 2026-12-05) rounds away
  # from zero, float32 to bfloat16: `x = 1 + f * 2**-7` (`f` of the gap
  # above 1; negated for `f < 0`), bits `i << shift` in element
  # `i = 0, ..., 1023`.
  @parameterized.parameters(
      (22, 0.25, 512), (22, 0.75, 1024),
      (13, 0.25, 256), (13, 0.5, 512), (13, 0.01, 11), (13, -0.25, 256),
      (12, 0.25, 512), (12, 0.5, 1024), (12, 0.01, 21),
      (0, 0.25, 1024), (0, 0.5, 1024), (0, 0.01, 1024),
  )
  def test_stochastic_round_to_bfloat16_as_a_tpu_v5e(self, shift, f, count):
    x = np.full((8, 128), np.sign(f) * (1 + abs(f) * 2**-7), np.float32)
    i = np.arange(8 * 128, dtype=np.uint32).reshape(8, 128)
    result = self._stochastic_round(x, i << shift, jnp.bfloat16)
    away = np.abs(result) > 1
    self.assertEqual(int(np.sum(away)), count)
    # Those whose low 23 bits, as a fraction of 2**23, are below `|f|`.
    np.testing.assert_array_equal(
        away, ((i << shift) & 0x7FFFFF) < abs(f) * 2**23)

  @parameterized.parameters(
      jnp.bfloat16, jnp.float8_e5m2, jnp.float8_e4m3fn,
      jnp.float8_e4m3b11fnuz, jnp.float4_e2m1fn)
  def test_stochastic_round_keeps_exact_values(self, dtype):
    magnitudes = self._finite_magnitudes(dtype)
    values = np.concatenate([magnitudes, -magnitudes])
    # 1024 of them, from the smallest to the largest magnitude.
    x = values[np.linspace(0, len(values) - 1, 8 * 128).astype(int)]
    x = x.reshape(8, 128).astype(np.float32)
    for bits in (0, 2**32 - 1):
      result = self._stochastic_round(
          x, np.full(x.shape, bits, np.uint32), dtype)
      np.testing.assert_array_equal(result, x)

  def test_stochastic_round_to_int4_saturates(self):
    x = np.resize(np.array([7.5, 100.0, -8.5, -100.0, 6.0, -0.5], np.float32),
                  (8, 128))
    # Bits 0 round every inexact value away from zero.
    result = self._stochastic_round(x, np.zeros(x.shape, np.uint32), jnp.int4)
    expected = np.resize(np.array([7.0, 7.0, -8.0, -8.0, 6.0, -1.0]),
                         (8, 128))
    np.testing.assert_array_equal(result, expected)

  def test_stochastic_round_of_bfloat16_raises(self):
    x = np.ones((8, 128), jnp.bfloat16)
    with self.assertRaisesRegex(ValueError, 'Only float32 input'):
      self._stochastic_round(
          x, np.zeros(x.shape, np.uint32), jnp.float8_e5m2)


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
