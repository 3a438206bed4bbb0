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

"""Tests that TPU interpret mode rejects integer arithmetic Mosaic rejects.

To work around https://github.com/jax-ml/jax/issues/25671 , this file
contains only tests that do not use shard_map.
"""

import dataclasses

from absl.testing import absltest
from absl.testing import parameterized
import jax
from jax._src import test_util as jtu
from jax._src.pallas.mosaic import error_handling
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
import jax.numpy as jnp
import numpy as np
import tpu_interpret_test_util as test_util


jax.config.parse_flags_with_absl()


# TODO(jburnim): Figure out how to safely run different instance of TPU
# interpret mode in parallel, and then remove this decorator.
@jtu.thread_unsafe_test_class()
class InterpretIntegerWidthTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 10, 0):
      self.skipTest(
          'jax 0.9.x and older: their series (maintenance-only) have no'
          ' integer width patch'
      )
    # Older jax releases: end.

  def _smem_call(self, kernel, x, params=None):
    """`kernel(x_ref, o_ref)` with `x` and a (1,) output of its dtype in SMEM."""
    spec = pl.BlockSpec(memory_space=pltpu.SMEM)
    return pl.pallas_call(
        kernel,
        in_specs=[spec],
        out_specs=spec,
        out_shape=jax.ShapeDtypeStruct((1,), x.dtype),
        interpret=params or test_util.interpret_params(),
    )(x)

  def _vmem_call(self, kernel, x, params=None):
    """`kernel(x_ref, o_ref)` with `x` and an output like it in VMEM."""
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        interpret=params or test_util.interpret_params(),
    )(x)

  def _v5e_params(self):
    # Older jax releases: begin.
    fields = {f.name for f in dataclasses.fields(pltpu.InterpretParams)}
    if 'device_kind' not in fields:
      self.skipTest(
          f'jax {jax.__version__}: its series cannot simulate a TPU v5e'
      )
    # Older jax releases: end.
    return test_util.interpret_params(device_kind='TPU v5 lite')

  @parameterized.parameters(jnp.int8, jnp.uint8, jnp.int16, jnp.uint16)
  def test_narrow_scalar_addition_raises_as_mosaic_does(self, dtype):
    def kernel(x_ref, o_ref):
      o_ref[0] = x_ref[0] + x_ref[1]

    bits = np.dtype(dtype).itemsize * 8
    with self.assertRaisesRegex(
        error_handling.MosaicError,
        f"Not implemented: Only i32 arith.addi is supported, but got 'i{bits}'",
    ):
      self._smem_call(kernel, jnp.arange(4, dtype=dtype))

  @parameterized.named_parameters(
      ('and', lambda x, y: x & y),
      ('shift', lambda x, y: x << y),
      ('max', jnp.maximum),
      ('or', lambda x, y: x | y),
  )
  def test_narrow_scalar_ops_raise_as_mosaic_does(self, op):
    def kernel(x_ref, o_ref):
      o_ref[0] = op(x_ref[2], x_ref[1])

    with self.assertRaisesRegex(
        error_handling.MosaicError,
        r'Not implemented: Only i1 and i32 scalars are supported\.',
    ):
      self._smem_call(kernel, jnp.arange(4, dtype=jnp.int8))

  def test_narrow_scalars_are_loaded_converted_and_stored(self):
    # What a TPU compiles: the arithmetic done in int32.
    def kernel(x_ref, o_ref):
      total = x_ref[0].astype(jnp.int32) * x_ref[1].astype(jnp.int32)
      o_ref[0] = total.astype(jnp.int8)

    x = np.array([-7, 9, 0, 0], np.int8)
    np.testing.assert_array_equal(self._smem_call(kernel, x),
                                  np.array([-63], np.int8))

  @parameterized.parameters(jnp.int8, jnp.uint8, jnp.int4)
  def test_vector_arithmetic_narrower_than_16_bits_raises(self, dtype):
    def kernel(x_ref, o_ref):
      o_ref[...] = x_ref[...] * x_ref[...]

    bits = jnp.iinfo(dtype).bits
    with self.assertRaisesRegex(
        error_handling.MosaicError,
        r'Not implemented: Only vector<i16> and vector<i32> are supported,'
        f" but got 'i{bits}'",
    ):
      self._vmem_call(kernel, jnp.ones((32, 128), dtype))

  def test_narrow_vector_bitwise_ops_and_16_bit_arithmetic_run(self):
    def kernel(x_ref, o_ref):
      o_ref[...] = (x_ref[...] ^ 0x55) & ~x_ref[...]

    x = np.arange(32 * 128).reshape(32, 128).astype(np.int8)
    np.testing.assert_array_equal(self._vmem_call(kernel, x), (x ^ 0x55) & ~x)

    def add_kernel(x_ref, o_ref):
      o_ref[...] = x_ref[...] + x_ref[...]

    y = (np.arange(16 * 128) * 37).reshape(16, 128).astype(np.int16)
    np.testing.assert_array_equal(self._vmem_call(add_kernel, y), y + y)

  def test_v5e_rejects_16_bit_vector_shifts(self):
    # A TPU v5e (jax 0.10.2) fails to legalize a shift of int16 vectors;
    # without a simulated TPU, interpret mode computes it.
    def kernel(x_ref, o_ref):
      o_ref[...] = x_ref[...] << 3

    x = np.arange(16 * 128).reshape(16, 128).astype(np.int16)
    np.testing.assert_array_equal(self._vmem_call(kernel, x), x << 3)
    with self.assertRaisesRegex(
        error_handling.MosaicError,
        "failed to legalize operation 'arith.shli'",
    ):
      self._vmem_call(kernel, x, self._v5e_params())

  def test_v5e_rejects_ordered_comparisons_of_int8_vectors(self):
    def compare(x_ref, o_ref):
      o_ref[...] = jnp.where(x_ref[...] < 3, x_ref[...], 0)

    def equal(x_ref, o_ref):
      o_ref[...] = jnp.where(x_ref[...] == 3, x_ref[...], 0)

    x = (np.arange(32 * 128) % 7).reshape(32, 128).astype(np.int8)
    params = self._v5e_params()
    with self.assertRaisesRegex(
        error_handling.MosaicError, 'Target does not support this comparison'
    ):
      self._vmem_call(compare, x, params)
    np.testing.assert_array_equal(self._vmem_call(equal, x, params),
                                  np.where(x == 3, x, 0))

  # Older jax releases only: the Mosaic lowering of jax 0.11 and older
  # rejects a DMA of bools (a TPU v5e with jax 0.10.2 did); jax 0.12's does
  # not, nor does its series.
  def test_bool_dma_raises_as_mosaic_does(self):
    if jax.__version_info__ >= (0, 12, 0):
      self.skipTest("jax 0.12's Mosaic lowering compiles DMAs of bools")

    def kernel(x_ref, o_ref, sem):
      copy = pltpu.make_async_copy(x_ref, o_ref, sem)
      copy.start()
      copy.wait()

    with self.assertRaisesRegex(
        NotImplementedError, r'DMAs with bool dtypes are not supported\.'
    ):
      pl.pallas_call(
          kernel,
          out_shape=jax.ShapeDtypeStruct((8, 128), jnp.bool_),
          in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
          out_specs=pl.BlockSpec(memory_space=pl.ANY),
          scratch_shapes=[pltpu.SemaphoreType.DMA],
          interpret=test_util.interpret_params(),
      )(np.ones((8, 128), np.bool_))

  def test_interpreter_implementations_are_not_checked(self):
    # The interpreter implements `pltpu.unpack_elementwise` with shifts of
    # 16-bit integers, which a TPU v5e does not compile; Mosaic lowers the
    # primitive as one operation of its own.
    def kernel(x_ref, o_ref):
      o_ref[...] = pltpu.unpack_elementwise(
          x_ref[...], index=0, packed_dtype=jnp.bfloat16,
          unpacked_dtype=jnp.float32)

    x = (np.arange(8 * 128, dtype=np.uint32) * 0x9E3779B1).reshape(8, 128)
    # Normal numbers in both halves: an exponent neither 0 nor all ones.
    x = (x & np.uint32(0x3FFF3FFF)) | np.uint32(0x20002000)
    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        interpret=self._v5e_params(),
    )(x)
    np.testing.assert_array_equal(
        np.asarray(out).view(np.uint32), (x & 0xFFFF) << 16)

if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
