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

"""Tests for ref views (`ref.reshape`, `ref.bitcast`) in TPU interpret mode.

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
class InterpretRefViewTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 11, 0):
      self.skipTest(
          'jax 0.10 and older: their series have no ref view patch (0013)'
      )
    # Older jax releases: end.

  @staticmethod
  def _pack_16_bit_rows(x16: np.ndarray) -> np.ndarray:
    """Packs rows 2i and 2i+1 of 16-bit `x16` into row i of an int32 array.

    As the TPU packs two 16-bit rows into one 32-bit sublane: row 2i in the
    low half, little-endian.
    """
    lo = x16[0::2].view(np.uint16).astype(np.uint32)
    hi = x16[1::2].view(np.uint16).astype(np.uint32)
    return (lo | (hi << 16)).view(np.int32)

  def test_load_and_store_through_reshape(self):
    x = np.arange(8 * 128, dtype=np.float32).reshape(8, 128)

    def kernel(x_ref, o_ref):
      o_ref[...] = jnp.zeros_like(o_ref)
      # Rows 2 and 3 of x viewed as (16, 64) are the second half of row 1.
      o_ref.reshape(4, 256)[2:4, :] = x_ref.reshape(16, 64)[2:10, :].reshape(
          2, 256
      )

    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        interpret=pltpu.InterpretParams(),
    )(x)
    expected = np.zeros((8, 128), np.float32)
    expected.reshape(4, 256)[2:4] = x.reshape(16, 64)[2:10].reshape(2, 256)
    np.testing.assert_array_equal(out, expected)

  def test_load_and_store_through_same_width_bitcast(self):
    x = np.arange(8 * 128, dtype=np.float32).reshape(8, 128)

    def kernel(x_ref, o_ref, f_ref):
      o_ref[...] = x_ref.bitcast(jnp.int32)[...] + 1
      sign_bit = jnp.int32(np.iinfo(np.int32).min)
      f_ref.bitcast(jnp.int32)[...] = x_ref.bitcast(jnp.int32)[...] ^ sign_bit

    out, flipped = pl.pallas_call(
        kernel,
        out_shape=(
            jax.ShapeDtypeStruct((8, 128), jnp.int32),
            jax.ShapeDtypeStruct((8, 128), jnp.float32),
        ),
        interpret=pltpu.InterpretParams(),
    )(x)
    np.testing.assert_array_equal(out, x.view(np.int32) + 1)
    # Flipping the sign bit negates a float32.
    np.testing.assert_array_equal(flipped, -x)

  def test_bitcast_packing_16_bit_rows_into_32_bit(self):
    x16 = (np.arange(16 * 128, dtype=np.int32) * 37 - 30000).astype(np.int16)
    x16 = x16.reshape(16, 128)

    def kernel(x_ref, packed_ref, unpacked_ref):
      packed = x_ref.bitcast(jnp.int32)[...]
      packed_ref[...] = packed
      unpacked_ref.bitcast(jnp.int32)[...] = packed

    packed, unpacked = pl.pallas_call(
        kernel,
        out_shape=(
            jax.ShapeDtypeStruct((8, 128), jnp.int32),
            jax.ShapeDtypeStruct((16, 128), jnp.int16),
        ),
        interpret=pltpu.InterpretParams(),
    )(x16)
    np.testing.assert_array_equal(packed, self._pack_16_bit_rows(x16))
    np.testing.assert_array_equal(unpacked, x16)

  def test_bitcast_packing_4_bit_rows_into_32_bit(self):
    x4 = (np.arange(16 * 128) % 16 - 8).astype(jnp.int4).reshape(16, 128)
    # Row i of the int32 view packs rows 8i to 8i+7, row 8i + k in bits
    # [4k, 4k + 4).
    nibbles = (x4.astype(np.int32) & 0xF).astype(np.uint32).reshape(2, 8, 128)
    expected = np.zeros((2, 128), np.uint32)
    for k in range(8):
      expected |= nibbles[:, k] << (4 * k)

    def kernel(x_ref, o_ref):
      o_ref[...] = x_ref.bitcast(jnp.int32)[...]

    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((2, 128), jnp.int32),
        interpret=pltpu.InterpretParams(),
    )(x4)
    np.testing.assert_array_equal(out, expected.view(np.int32))

  def test_store_to_part_of_a_bitcast_view(self):
    x16 = np.arange(16 * 128, dtype=np.int16).reshape(16, 128)

    def kernel(x_ref, o_ref):
      o_ref[...] = x_ref[...]
      # Row 1 of the int32 view is rows 2 and 3 of the int16 ref.
      o_ref.bitcast(jnp.int32)[1, :] = jnp.full((128,), 0x00070005, jnp.int32)

    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((16, 128), jnp.int16),
        interpret=pltpu.InterpretParams(),
    )(x16)
    expected = x16.copy()
    expected[2] = 5
    expected[3] = 7
    np.testing.assert_array_equal(out, expected)

  def test_dma_from_a_bitcast_view_into_a_reshaped_view(self):
    x16 = (np.arange(16 * 128, dtype=np.int32) * 91).astype(np.int16)
    x16 = x16.reshape(16, 128)

    def kernel(x_hbm_ref, o_hbm_ref, scratch_ref, sem):
      # HBM (16, 128) int16 viewed as (8, 128) int32, into VMEM.
      copy_in = pltpu.make_async_copy(
          x_hbm_ref.bitcast(jnp.int32), scratch_ref, sem
      )
      copy_in.start()
      copy_in.wait()
      # VMEM (8, 128) int32 into HBM (4, 256) int32 viewed as (8, 128).
      copy_out = pltpu.make_async_copy(
          scratch_ref, o_hbm_ref.reshape(8, 128), sem
      )
      copy_out.start()
      copy_out.wait()

    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((4, 256), jnp.int32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[
            pltpu.VMEM((8, 128), jnp.int32),
            pltpu.SemaphoreType.DMA,
        ],
        interpret=pltpu.InterpretParams(),
    )(x16)
    np.testing.assert_array_equal(
        out, self._pack_16_bit_rows(x16).reshape(4, 256)
    )

  def test_transposed_ref_raises_not_implemented(self):
    # Mosaic's `_transform_ref` has no rule for a `TransposeTransform` either.
    x = np.arange(128 * 128, dtype=np.float32).reshape(128, 128)

    def kernel(x_ref, o_ref, sem):
      copy = pltpu.make_async_copy(x_ref.T, o_ref, sem)
      copy.start()
      copy.wait()

    with self.assertRaisesRegex(
        NotImplementedError, 'dma_start_p of a ref with a TransposeTransform'
    ):
      pl.pallas_call(
          kernel,
          out_shape=jax.ShapeDtypeStruct((128, 128), jnp.float32),
          in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
          out_specs=pl.BlockSpec(memory_space=pl.ANY),
          scratch_shapes=[pltpu.SemaphoreType.DMA],
          interpret=pltpu.InterpretParams(),
      )(x)

if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
