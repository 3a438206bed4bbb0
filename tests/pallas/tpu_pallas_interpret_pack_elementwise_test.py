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

"""Tests of `pltpu.pack_elementwise` and `unpack_elementwise` in interpret mode.

The expected values are computed with numpy's bit operations (and numpy's
conversions to `jnp.bfloat16`), from the layout the primitives' docstrings
give: the `k`-th packed element in bits `[k * w, (k + 1) * w)`, lowest
first.

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
class InterpretPackElementwiseTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 10, 0):
      self.skipTest(
          'jax 0.9.x and older: their series (maintenance-only) have no'
          ' pack_elementwise patch'
      )
    # Older jax releases: end.

  def _run_packing_kernel(self, kernel, out_shape, *args):
    return pl.pallas_call(
        kernel,
        out_shape=out_shape,
        interpret=test_util.interpret_params(),
    )(*args)

  @parameterized.parameters(
      (jnp.int32, jnp.int16, 16),
      (jnp.int32, jnp.int8, 8),
      (jnp.int32, jnp.int4, 4),
      (jnp.int16, jnp.int8, 8),
  )
  def test_pack_elementwise_integers(self, dtype, packed_dtype, width):
    factor = np.dtype(dtype).itemsize * 8 // width
    rng = np.random.default_rng(0)
    xs = rng.integers(-(2**15), 2**15, (factor, 8, 128)).astype(dtype)

    def kernel(xs_ref, o_ref):
      o_ref[...] = pltpu.pack_elementwise(
          [xs_ref[i] for i in range(factor)], packed_dtype=packed_dtype)

    out_dtype = np.dtype(f'uint{np.dtype(dtype).itemsize * 8}')
    result = self._run_packing_kernel(
        kernel, jax.ShapeDtypeStruct((8, 128), out_dtype), xs)
    # Each element truncated to its low `width` bits, the first lowest.
    expected = np.zeros((8, 128), np.uint64)
    for k in range(factor):
      low_bits = xs[k].astype(np.int64) & ((1 << width) - 1)
      expected |= low_bits.astype(np.uint64) << np.uint64(k * width)
    self.assertEqual(result.dtype, out_dtype)
    np.testing.assert_array_equal(result, expected.astype(out_dtype))

  def test_pack_elementwise_float32_as_bfloat16(self):
    rng = np.random.default_rng(1)
    xs = rng.normal(size=(2, 8, 128)).astype(np.float32)

    def kernel(xs_ref, o_ref):
      o_ref[...] = pltpu.pack_elementwise(
          [xs_ref[0], xs_ref[1]], packed_dtype=jnp.bfloat16)

    result = self._run_packing_kernel(
        kernel, jax.ShapeDtypeStruct((8, 128), jnp.uint32), xs)
    low, high = (x.astype(jnp.bfloat16).view(np.uint16).astype(np.uint32)
                 for x in xs)
    np.testing.assert_array_equal(result, low | (high << np.uint32(16)))

  def test_pack_elementwise_float32_subnormals_as_zeros(self):
    # A TPU v5e packs a float32 subnormal as a zero of its sign (measured).
    tiny = np.finfo(np.float32).tiny
    values = np.array([1e-40, -1e-40, 1.4e-45, -1.4e-45, tiny, -tiny,
                       tiny / 2, 0.0, -0.0, 1.0, np.inf, np.nan],
                      np.float32)
    xs = np.stack([np.resize(values, (8, 128)),
                   np.resize(values[::-1], (8, 128))])

    def kernel(xs_ref, o_ref):
      o_ref[...] = pltpu.pack_elementwise(
          [xs_ref[0], xs_ref[1]], packed_dtype=jnp.bfloat16)

    result = np.asarray(self._run_packing_kernel(
        kernel, jax.ShapeDtypeStruct((8, 128), jnp.uint32), xs))
    flushed = np.where(np.abs(xs) < tiny, np.copysign(np.float32(0), xs), xs)
    low, high = (x.astype(jnp.bfloat16).view(np.uint16).astype(np.uint32)
                 for x in flushed)
    np.testing.assert_array_equal(result, low | (high << np.uint32(16)))
    # The subnormals gave zeros, not bfloat16 subnormals.
    self.assertEqual(int(result[0, 0]) & 0xFFFF, 0)
    self.assertEqual(int(result[0, 1]) & 0xFFFF, 0x8000)

  @parameterized.product(index=[0, 1, 2, 3], signed=[True, False])
  def test_unpack_elementwise_bytes_of_int32(self, index, signed):
    rng = np.random.default_rng(2)
    words = rng.integers(0, 2**32, (8, 128), dtype=np.uint64).astype(np.uint32)
    packed_dtype = jnp.int8 if signed else jnp.uint8

    def kernel(x_ref, o_ref):
      o_ref[...] = pltpu.unpack_elementwise(
          x_ref[...], index=index, packed_dtype=packed_dtype,
          unpacked_dtype=jnp.int32)

    result = self._run_packing_kernel(
        kernel, jax.ShapeDtypeStruct((8, 128), jnp.int32), words)
    byte = ((words >> np.uint32(8 * index)) & np.uint32(0xFF)).astype(np.int32)
    # int8: sign-extended; uint8: zero-extended.
    expected = np.where(byte >= 128, byte - 256, byte) if signed else byte
    np.testing.assert_array_equal(result, expected)

  @parameterized.parameters(0, 1)
  def test_unpack_elementwise_nibbles_of_int8(self, index):
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 10, 2):
      self.skipTest(
          'jax 0.10.1 and older: unpack_elementwise takes uint32 sources only'
      )
    # Older jax releases: end.
    words = np.arange(-128, 128, dtype=np.int8).reshape(2, 128)

    def kernel(x_ref, o_ref):
      o_ref[...] = pltpu.unpack_elementwise(
          x_ref[...], index=index, packed_dtype=jnp.int4,
          unpacked_dtype=jnp.int8)

    result = self._run_packing_kernel(
        kernel, jax.ShapeDtypeStruct((2, 128), jnp.int8), words)
    nibble = (words.view(np.uint8).astype(np.int32) >> (4 * index)) & 0xF
    expected = np.where(nibble >= 8, nibble - 16, nibble).astype(np.int8)
    np.testing.assert_array_equal(result, expected)

  @parameterized.parameters(0, 1)
  def test_unpack_elementwise_bfloat16_as_float32(self, index):
    rng = np.random.default_rng(3)
    halves = rng.normal(size=(2, 8, 128)).astype(jnp.bfloat16)
    bits = halves.view(np.uint16).astype(np.uint32)
    words = bits[0] | (bits[1] << np.uint32(16))

    def kernel(x_ref, o_ref):
      o_ref[...] = pltpu.unpack_elementwise(
          x_ref[...], index=index, packed_dtype=jnp.bfloat16,
          unpacked_dtype=jnp.float32)

    result = self._run_packing_kernel(
        kernel, jax.ShapeDtypeStruct((8, 128), jnp.float32), words)
    np.testing.assert_array_equal(result, halves[index].astype(np.float32))

  def test_unpack_elementwise_bfloat16_subnormals_and_nans(self):
    # A TPU v5e unpacks a bfloat16 subnormal as a zero of its sign and every
    # NaN as the quiet NaN 0x7FC00000 (measured).
    halves = np.array([0x0001, 0x807F, 0x0040, 0x8001, 0xFF89, 0x7FB7,
                       0x7FC0, 0xFFC0, 0x3F80, 0x0080, 0x8080, 0x0000],
                      np.uint16)
    low = np.resize(halves, (8, 128)).astype(np.uint32)
    high = np.resize(halves[::-1], (8, 128)).astype(np.uint32)
    words = low | (high << np.uint32(16))

    def kernel(x_ref, o_ref):
      for index in range(2):
        o_ref[index] = pltpu.unpack_elementwise(
            x_ref[...], index=index, packed_dtype=jnp.bfloat16,
            unpacked_dtype=jnp.float32)

    result = np.asarray(self._run_packing_kernel(
        kernel, jax.ShapeDtypeStruct((2, 8, 128), jnp.float32), words))
    for index, bits in enumerate((low, high)):
      widened = (bits << np.uint32(16)).view(np.float32)
      expected = np.where(
          np.abs(widened) < np.finfo(np.float32).tiny,
          np.copysign(np.float32(0), widened), widened).view(np.uint32)
      expected = np.where(np.isnan(widened), np.uint32(0x7FC00000), expected)
      np.testing.assert_array_equal(result[index].view(np.uint32), expected)

  def test_unpack_elementwise_inverts_pack_elementwise(self):
    rng = np.random.default_rng(4)
    xs = rng.integers(-128, 128, (4, 8, 128)).astype(np.int32)

    def kernel(xs_ref, o_ref):
      packed = pltpu.pack_elementwise(
          [xs_ref[i] for i in range(4)], packed_dtype=jnp.int8)
      for i in range(4):
        o_ref[i] = pltpu.unpack_elementwise(
            packed, index=i, packed_dtype=jnp.int8, unpacked_dtype=jnp.int32)

    result = self._run_packing_kernel(
        kernel, jax.ShapeDtypeStruct((4, 8, 128), jnp.int32), xs)
    np.testing.assert_array_equal(result, xs)


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
