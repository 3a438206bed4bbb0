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

"""Tests of PRNG implementations whose functions are interpreted kernels.

To work around https://github.com/jax-ml/jax/issues/25671 , this file
contains only tests that do not use shard_map.
"""

import math

from absl.testing import absltest
from absl.testing import parameterized
import jax
from jax._src import test_util as jtu
from jax.experimental import io_callback
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas.ops.tpu.random import threefry  # noqa: F401
import jax.extend as jex
import jax.numpy as jnp
import numpy as np
import tpu_interpret_test_util as test_util


jax.config.parse_flags_with_absl()


# TODO(jburnim): Figure out how to safely run different instance of TPU
# interpret mode in parallel, and then remove this decorator.
@jtu.thread_unsafe_test_class()
class InterpretRandomImplTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 10, 2):
      self.skipTest(
          'jax 0.10.1 and older: their series have no patch for the effects'
          ' of PRNG implementations (jax/_src/prng.py there)'
      )
    # Older jax releases: end.

  def _kernel_prng_impl(self):
    """A PRNG implementation whose every function is an interpreted kernel.

    Keys are `uint32[2]`. With `iota` the index of an output element:
    `seed(s) = [s, 3 s + 1]`; the `j`-th key of `split(k)` is
    `k + (j + 1) * [1, 2]`; `fold_in(k, d) = k + d * [1, 2]`; the bits of
    `k` are `k[0] * iota + k[1]`, all modulo 2**32.

    Returns:
      The implementation, for `jax.random.key(..., impl=...)`.
    """
    interpret = test_util.interpret_params()
    u32 = jnp.uint32

    def seed(s):
      def kernel(s_ref, o_ref):
        i = jax.lax.broadcasted_iota(u32, (2,), 0)
        o_ref[...] = s_ref[...] * (2 * i + 1) + i

      return pl.pallas_call(
          kernel, out_shape=jax.ShapeDtypeStruct((2,), u32),
          interpret=interpret)(s.astype(u32).reshape(1))

    def split(key, shape):
      n = math.prod(shape)

      def kernel(k_ref, o_ref):
        j = jax.lax.broadcasted_iota(u32, (n, 2), 0)
        c = jax.lax.broadcasted_iota(u32, (n, 2), 1)
        o_ref[...] = k_ref[...][None, :] + (j + 1) * (c + 1)

      keys = pl.pallas_call(
          kernel, out_shape=jax.ShapeDtypeStruct((n, 2), u32),
          interpret=interpret)(key)
      return keys.reshape(*shape, 2)

    def fold_in(key, data):
      def kernel(k_ref, d_ref, o_ref):
        c = jax.lax.broadcasted_iota(u32, (2,), 0)
        o_ref[...] = k_ref[...] + d_ref[...] * (c + 1)

      return pl.pallas_call(
          kernel, out_shape=jax.ShapeDtypeStruct((2,), u32),
          interpret=interpret)(key, jnp.asarray(data, u32).reshape(1))

    def random_bits(key, bit_width, shape):
      self.assertEqual(bit_width, 32)
      n = math.prod(shape)

      def kernel(k_ref, o_ref):
        k = k_ref[...]
        o_ref[...] = k[0] * jax.lax.broadcasted_iota(u32, (n,), 0) + k[1]

      bits = pl.pallas_call(
          kernel, out_shape=jax.ShapeDtypeStruct((n,), u32),
          interpret=interpret)(key)
      return bits.reshape(shape)

    return jex.random.define_prng_impl(
        key_shape=(2,), seed=seed, split=split, random_bits=random_bits,
        fold_in=fold_in, name='interpreted_kernels', tag='ik')

  def test_prng_impl_of_interpreted_kernels(self):
    impl = self._kernel_prng_impl()

    @jax.jit
    def f(s):
      key = jax.random.key(s, impl=impl)
      keys = jax.random.split(key, 3)
      folded = jax.random.fold_in(key, 5)
      return (jax.random.key_data(key), jax.random.key_data(keys),
              jax.random.key_data(folded),
              jax.random.bits(folded, (4, 8), jnp.uint32))

    s = 7
    key, keys, folded, bits = f(s)
    expected_key = np.array([s, 3 * s + 1], np.uint32)
    np.testing.assert_array_equal(key, expected_key)
    np.testing.assert_array_equal(
        keys,
        expected_key + np.arange(1, 4, dtype=np.uint32)[:, None]
        * np.array([1, 2], np.uint32))
    expected_folded = expected_key + np.uint32(5) * np.array([1, 2], np.uint32)
    np.testing.assert_array_equal(folded, expected_folded)
    np.testing.assert_array_equal(
        bits,
        (expected_folded[0] * np.arange(32, dtype=np.uint32)
         + expected_folded[1]).reshape(4, 8))

  def test_prng_impl_of_interpreted_kernels_under_vmap(self):
    impl = self._kernel_prng_impl()
    seeds = np.array([1, 2, 3], np.int32)
    bits = jax.jit(jax.vmap(
        lambda s: jax.random.bits(jax.random.key(s, impl=impl), (16,))))(seeds)
    keys = np.stack([seeds, 3 * seeds + 1], axis=1).astype(np.uint32)
    np.testing.assert_array_equal(
        bits, keys[:, :1] * np.arange(16, dtype=np.uint32) + keys[:, 1:])

  def test_prng_primitives_declare_the_ordered_effect_of_the_kernels(self):
    impl = self._kernel_prng_impl()
    ordered_effects = jax.make_jaxpr(
        lambda: io_callback(lambda: None, None, ordered=True))().effects

    def copy(x_ref, o_ref):
      o_ref[...] = x_ref[...]

    kernel_call_effects = jax.make_jaxpr(
        pl.pallas_call(
            copy, out_shape=jax.ShapeDtypeStruct((2,), jnp.uint32),
            interpret=test_util.interpret_params())
    )(np.zeros((2,), np.uint32)).effects
    # An interpreted kernel's callbacks are ordered.
    self.assertContainsSubset(ordered_effects, kernel_call_effects)
    self.assertEqual(
        jax.make_jaxpr(
            lambda: jax.random.key_data(jax.random.key(0, impl=impl))
        )().effects,
        ordered_effects)
    for fun in (lambda k: jax.random.bits(k, (8, 128)),
                lambda k: jax.random.key_data(jax.random.split(k)),
                lambda k: jax.random.key_data(jax.random.fold_in(k, 1))):
      self.assertEqual(
          jax.make_jaxpr(fun)(jax.random.key(0, impl=impl)).effects,
          ordered_effects)
      # JAX's own implementations have no effects.
      self.assertEqual(
          jax.make_jaxpr(fun)(jax.random.key(0, impl='threefry2x32')).effects,
          set())

  def test_pallas_key_outside_of_a_kernel_still_raises(self):
    # The Pallas PRNG's own effect is local to a kernel and not declared:
    # outside of a kernel its primitives still have no XLA lowering.
    key = pltpu.to_pallas_key(jax.random.key(0, impl='rbg'))
    with self.assertRaisesRegex(NotImplementedError,
                                'MLIR translation rule .* not found'):
      jax.random.uniform(key, shape=(1,))

  @parameterized.parameters(((8, 128),), ((34,),), ((),))
  def test_pallas_threefry_matches_threefry(self, shape):
    # impl="pallas_threefry2x32" draws its bits with a Pallas kernel.
    with pltpu.force_tpu_interpret_mode(), jax.threefry_partitionable(True):
      bits = jax.random.bits(
          jax.random.key(0, impl='pallas_threefry2x32'), shape)
      expected = jax.random.bits(
          jax.random.key(0, impl='threefry2x32'), shape)
      uniform = jax.jit(lambda k: jax.random.uniform(k, shape))(
          jax.random.key(0, impl='pallas_threefry2x32'))
      expected_uniform = jax.random.uniform(
          jax.random.key(0, impl='threefry2x32'), shape)
    np.testing.assert_array_equal(bits, expected)
    np.testing.assert_array_equal(uniform, expected_uniform)


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
