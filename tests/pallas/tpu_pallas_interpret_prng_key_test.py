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

"""Tests of PRNG key-typed refs, inputs and outputs in TPU interpret mode.

To work around https://github.com/jax-ml/jax/issues/25671 , this file
contains only tests that do not use shard_map.
"""

from absl.testing import absltest
import jax
from jax._src import test_util as jtu
from jax._src.pallas.mosaic import random as plrandom
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
import jax.numpy as jnp
import numpy as np
import tpu_interpret_test_util as test_util


jax.config.parse_flags_with_absl()


# TODO(jburnim): Figure out how to safely run different instance of TPU
# interpret mode in parallel, and then remove this decorator.
@jtu.thread_unsafe_test_class()
class InterpretPrngKeyTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 11, 0):
      self.skipTest(
          'jax 0.10 and older: their series have no PRNG key patch (0016 of'
          ' the 0.11 and 0.12 series)'
      )
    # Older jax releases: end.

  def test_threefry_key_input_samples_as_outside_the_kernel(self):
    def kernel(key_ref, bits_ref, uniform_ref):
      key = key_ref[...]
      bits_ref[...] = jax.random.bits(key, bits_ref.shape)
      uniform_ref[...] = jax.random.uniform(key, uniform_ref.shape)

    key = jax.random.key(3, impl='threefry2x32')
    with jax.threefry_partitionable(True):
      bits, uniform = pl.pallas_call(
          kernel,
          in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
          out_shape=(
              jax.ShapeDtypeStruct((8, 128), jnp.uint32),
              jax.ShapeDtypeStruct((8, 128), jnp.float32),
          ),
          interpret=test_util.interpret_params(),
      )(key)
      expected_bits = jax.random.bits(key, (8, 128))
      expected_uniform = jax.random.uniform(key, (8, 128))
    np.testing.assert_array_equal(bits, expected_bits)
    np.testing.assert_array_equal(uniform, expected_uniform)

  def test_key_output_copied_by_load_and_store_and_by_dma(self):
    # A key-typed output holds the input's keys, whether the kernel stores
    # the loaded keys or copies the ref with a DMA.
    def load_store(x_ref, o_ref):
      o_ref[...] = x_ref[...]

    def dma(x_ref, o_ref):
      pltpu.sync_copy(x_ref, o_ref)

    for impl in ['threefry2x32', 'rbg']:
      keys = jax.random.split(jax.random.key(5, impl=impl), 3)
      for kernel in [load_store, dma]:
        with self.subTest(impl=impl, kernel=kernel.__name__):
          out = pl.pallas_call(
              kernel,
              out_shape=jax.ShapeDtypeStruct((3,), jax.typeof(keys).dtype),
              in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM)],
              out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),
              interpret=test_util.interpret_params(),
          )(keys)
          self.assertEqual(jax.typeof(out).dtype, jax.typeof(keys).dtype)
          np.testing.assert_array_equal(
              jax.random.key_data(out), jax.random.key_data(keys)
          )

  def test_keys_made_in_the_kernel_from_key_data(self):
    # `jax.random.wrap_key_data` and `jax.random.key_data` inside the
    # kernel, with a key-typed output.
    def kernel(data_ref, keys_ref, data_out_ref):
      keys = jax.random.wrap_key_data(data_ref[...], impl='threefry2x32')
      keys_ref[...] = keys
      data_out_ref[...] = jax.random.key_data(keys_ref[...]) + 1

    data = jnp.arange(8, dtype=jnp.uint32).reshape(4, 2) * 1000
    key_dtype = jax.typeof(jax.random.key(0, impl='threefry2x32')).dtype
    keys, data_out = pl.pallas_call(
        kernel,
        out_shape=(
            jax.ShapeDtypeStruct((4,), key_dtype),
            jax.ShapeDtypeStruct((4, 2), jnp.uint32),
        ),
        interpret=test_util.interpret_params(),
    )(data)
    np.testing.assert_array_equal(jax.random.key_data(keys), data)
    np.testing.assert_array_equal(data_out, data + 1)

  def test_blocks_of_a_key_array(self):
    # A grid over an array of keys: each step folds its index into a block
    # of two keys (a key-typed output block) and samples from the first.
    def kernel(keys_ref, out_keys_ref, bits_ref):
      i = pl.program_id(0)
      out_keys_ref[...] = jax.vmap(jax.random.fold_in, in_axes=(0, None))(
          keys_ref[...], i
      )
      bits_ref[...] = jax.random.bits(keys_ref[0], bits_ref.shape)

    keys = jax.random.split(jax.random.key(7, impl='threefry2x32'), 6)
    out_keys, bits = pl.pallas_call(
        kernel,
        grid=(3,),
        in_specs=[pl.BlockSpec((2,), lambda i: (i,))],
        out_specs=(
            pl.BlockSpec((2,), lambda i: (i,)),
            pl.BlockSpec((None, 8, 128), lambda i: (i, 0, 0)),
        ),
        out_shape=(
            jax.ShapeDtypeStruct((6,), jax.typeof(keys).dtype),
            jax.ShapeDtypeStruct((3, 8, 128), jnp.uint32),
        ),
        interpret=test_util.interpret_params(),
    )(keys)
    expected_keys = [jax.random.fold_in(k, i // 2) for i, k in enumerate(keys)]
    np.testing.assert_array_equal(
        jax.random.key_data(out_keys),
        np.stack([jax.random.key_data(k) for k in expected_keys]),
    )
    for i in range(3):
      np.testing.assert_array_equal(
          bits[i], jax.random.bits(keys[2 * i], (8, 128))
      )

  def test_key_scratch_buffer(self):
    # A key-typed scratch buffer in SMEM: stored, loaded and sampled from.
    key = jax.random.key(11, impl='threefry2x32')

    def kernel(key_ref, o_ref, scratch_ref):
      scratch_ref[...] = jax.random.fold_in(key_ref[...], 4)
      o_ref[...] = jax.random.bits(scratch_ref[...], o_ref.shape)

    bits = pl.pallas_call(
        kernel,
        in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM)],
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.uint32),
        scratch_shapes=[pltpu.SMEM((), jax.typeof(key).dtype)],
        interpret=test_util.interpret_params(),
    )(key)
    np.testing.assert_array_equal(
        bits, jax.random.bits(jax.random.fold_in(key, 4), (8, 128))
    )

  def test_pallas_key_data_and_fold_in(self):
    # A Pallas key (`pltpu.to_pallas_key`) as its two uint32 words, before
    # and after `jax.random.fold_in`; the fold-in of Pallas' PRNG adds the
    # data to the second word, then applies one threefry round (rotation
    # 13), computed here with numpy.
    def kernel(key_ref, o_ref):
      key = key_ref[...]
      o_ref[0], o_ref[1] = plrandom.unwrap_pallas_seed(key)
      o_ref[2], o_ref[3] = plrandom.unwrap_pallas_seed(
          jax.random.fold_in(key, jnp.uint32(9))
      )

    key = pltpu.to_pallas_key(jax.random.key(0, impl='rbg'))
    out = pl.pallas_call(
        kernel,
        in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM)],
        out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),
        out_shape=jax.ShapeDtypeStruct((4,), jnp.uint32),
        interpret=test_util.interpret_params(),
    )(key)
    x0, x1 = (int(w) for w in np.asarray(jax.random.key_data(key)).ravel())
    x1 = (x1 + 9) % 2**32
    x0 = (x0 + x1) % 2**32
    x1 = ((x1 << 13) | (x1 >> 19)) % 2**32
    x1 ^= x0
    np.testing.assert_array_equal(
        out,
        np.concatenate(
            [np.asarray(jax.random.key_data(key)).ravel(), [x0, x1]]
        ).astype(np.uint32),
    )

  def test_pallas_keys_sample_differently_after_fold_in(self):
    def kernel(key_ref, o_ref):
      key = key_ref[...]
      o_ref[0] = jax.random.uniform(key, o_ref.shape[1:])
      o_ref[1] = jax.random.uniform(key, o_ref.shape[1:])
      o_ref[2] = jax.random.uniform(
          jax.random.fold_in(key, jnp.uint32(1)), o_ref.shape[1:]
      )

    key = pltpu.to_pallas_key(jax.random.key(0, impl='rbg'))
    out = pl.pallas_call(
        kernel,
        in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM)],
        out_shape=jax.ShapeDtypeStruct((3, 8, 128), jnp.float32),
        interpret=test_util.interpret_params(),
    )(key)
    np.testing.assert_array_equal(out[0], out[1])
    self.assertLess(np.mean(np.asarray(out[0] == out[2])), 0.01)
    self.assertTrue(np.all((out >= 0) & (out < 1)))

  def test_fold_in_of_an_array_of_pallas_keys_is_not_implemented(self):
    def kernel(key_ref, o_ref):
      keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(
          key_ref[...], jnp.uint32(1)
      )
      o_ref[...] = jax.random.key_data(keys)

    keys = jax.vmap(pltpu.to_pallas_key)(
        jax.random.split(jax.random.key(0, impl='rbg'), 2)
    )
    with self.assertRaisesRegex(
        NotImplementedError, 'random_fold_in of an array of Pallas PRNG keys'
    ):
      pl.pallas_call(
          kernel,
          in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM)],
          out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),
          out_shape=jax.ShapeDtypeStruct((2, 1, 2), jnp.uint32),
          interpret=test_util.interpret_params(),
      )(keys)


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
