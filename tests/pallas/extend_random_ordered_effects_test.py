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

"""Tests of PRNG implementations whose functions have ordered effects.

Not a Pallas test: TPU interpret mode needs the fix (an interpreted kernel
has ordered effects), but it is a fix to jax's random primitives, exported
to upstream's `tests/extend_test.py`.
"""

import math
from unittest import mock

from absl.testing import absltest
import jax
from jax._src import test_util as jtu
from jax._src.random import prng
import jax.extend as jex
import jax.numpy as jnp


jax.config.parse_flags_with_absl()


class RandomImplOrderedEffectsTest(jtu.JaxTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 10, 2):
      self.skipTest(
          'jax 0.10.1 and older: their series have no patch for the effects'
          ' of PRNG implementations (jax/_src/prng.py there)'
      )
    # Older jax releases: end.

  def _callback_impl(self, calls, *, ordered=True, name='callbacks'):
    """A PRNG implementation whose every function runs a debug callback.

    Keys are `uint32[2]`: `seed(s) = [s, 3 s + 1]`; the `j`-th key of
    `split(k)` is `k + (j + 1) * [1, 2]`; `fold_in(k, d) = k + d * [1, 2]`;
    the `i`-th of the bits of `k` is `k[0] * i + k[1]`, all modulo 2**32.

    Args:
      calls: A list that each callback appends its function's name to.
      ordered: Whether the callbacks are ordered.
      name: The implementation's name.

    Returns:
      The implementation, for `jax.random.key(..., impl=...)`.
    """
    u32 = jnp.uint32

    def logged(fun_name, x):
      jax.debug.callback(lambda: calls.append(fun_name), ordered=ordered)
      return x

    def seed(s):
      s = jnp.asarray(s).astype(u32)
      return logged('seed', jnp.stack([s, 3 * s + 1]))

    def split(key, shape):
      j = jnp.arange(math.prod(shape), dtype=u32)[:, None]
      keys = key[None, :] + (j + 1) * jnp.array([[1, 2]], u32)
      return logged('split', keys.reshape(*shape, 2))

    def fold_in(key, data):
      return logged('fold_in',
                    key + jnp.asarray(data, u32) * jnp.array([1, 2], u32))

    def random_bits(key, bit_width, shape):
      self.assertEqual(bit_width, 32)
      i = jnp.arange(math.prod(shape), dtype=u32)
      return logged('random_bits', (key[0] * i + key[1]).reshape(shape))

    return jex.random.define_prng_impl(
        key_shape=(2,), seed=seed, split=split, random_bits=random_bits,
        fold_in=fold_in, name=name, tag='cb')

  def test_ordered_callbacks_of_an_impl_under_jit(self):
    calls = []
    impl = self._callback_impl(calls)

    @jax.jit
    def f(s):
      key = jax.random.key(s, impl=impl)
      keys = jax.random.split(key, 3)
      folded = jax.random.fold_in(key, 5)
      return (jax.random.key_data(keys), jax.random.key_data(folded),
              jax.random.bits(folded, (4, 8), jnp.uint32))

    s = 7
    keys, folded, bits = jax.device_get(f(s))
    jax.effects_barrier()
    key = [s, 3 * s + 1]
    self.assertEqual(keys.tolist(),
                     [[key[0] + j, key[1] + 2 * j] for j in (1, 2, 3)])
    expected_folded = [key[0] + 5, key[1] + 10]
    self.assertEqual(folded.tolist(), expected_folded)
    self.assertEqual(
        bits.ravel().tolist(),
        [(expected_folded[0] * i + expected_folded[1]) % 2**32
         for i in range(32)])
    self.assertEqual(calls, ['seed', 'split', 'fold_in', 'random_bits'])

  def test_primitives_declare_the_ordered_effects_of_the_impl(self):
    ordered_effects = jax.make_jaxpr(
        lambda: jax.debug.callback(lambda: None, ordered=True))().effects
    self.assertNotEmpty(ordered_effects)
    funs = (lambda k: jax.random.bits(k, (8, 128)),
            lambda k: jax.random.key_data(jax.random.split(k)),
            lambda k: jax.random.key_data(jax.random.fold_in(k, 1)))
    # Not JAX's threefry2x32 (which is registered under that name), so its
    # functions are traced for effects.
    for name in ('callbacks', 'threefry2x32'):
      impl = self._callback_impl([], name=name)
      self.assertEqual(
          jax.make_jaxpr(
              lambda: jax.random.key_data(jax.random.key(0, impl=impl))
          )().effects,
          ordered_effects)
      for fun in funs:
        self.assertEqual(
            jax.make_jaxpr(fun)(jax.random.key(0, impl=impl)).effects,
            ordered_effects)
    # Unordered effects need no token: none are declared.
    impl = self._callback_impl([], ordered=False)
    for fun in funs:
      self.assertEqual(
          jax.make_jaxpr(fun)(jax.random.key(0, impl=impl)).effects, set())

  def test_jax_impls_are_not_traced_for_effects(self):
    # Their functions have no effects: tracing draws with them does not
    # trace those functions again to look for some.
    names = {'threefry2x32', 'threefry4x32', 'philox2x32', 'philox4x32',
             'rbg', 'unsafe_rbg'} & set(prng.prngs)
    self.assertContainsSubset({'threefry2x32', 'rbg', 'unsafe_rbg'}, names)
    with mock.patch.object(prng, '_impl_effects',
                           side_effect=AssertionError('traced')):
      for name in sorted(names):
        key = jax.random.key(0, impl=name)
        self.assertEqual(
            jax.make_jaxpr(
                lambda k: (jax.random.bits(k, (8, 3)), jax.random.split(k),
                           jax.random.fold_in(k, 1),
                           jax.random.key(1, impl=name)))(key).effects,
            set())
      # An implementation of ours is traced.
      impl = self._callback_impl([])
      with self.assertRaisesRegex(AssertionError, 'traced'):
        jax.make_jaxpr(lambda: jax.random.key(0, impl=impl))()

  def test_jax_impls_have_no_effects(self):
    for impl in ('threefry2x32', 'rbg', 'unsafe_rbg'):
      key = jax.random.key(0, impl=impl)
      self.assertEqual(
          jax.make_jaxpr(
              lambda: jax.random.key_data(jax.random.key(0, impl=impl))
          )().effects,
          set())
      self.assertEqual(
          jax.make_jaxpr(
              lambda k: (jax.random.bits(k, (8,)), jax.random.split(k),
                         jax.random.fold_in(k, 1)))(key).effects,
          set())


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
