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

"""Tests for the stateful PRNG (`pltpu.prng_seed`) in TPU interpret mode.

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
class InterpretPrngTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 11, 0):
      self.skipTest(
          'jax 0.10 and older: their series have no PRNG patch (0009; 0.9 and'
          ' older are maintenance-only, and 0.10 has callbacks without tokens)'
      )
    # Older jax releases: end.

  def test_random_bits_depend_on_the_seeds(self):
    def kernel(seed_ref, o_ref):
      pltpu.prng_seed(seed_ref[0], seed_ref[1])
      o_ref[...] = pltpu.prng_random_bits(o_ref.shape)

    def run(*seeds):
      return pl.pallas_call(
          kernel,
          out_shape=jax.ShapeDtypeStruct((8, 128), jnp.int32),
          in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM)],
          interpret=pltpu.InterpretParams(),
      )(jnp.array(seeds, jnp.int32))

    bits = run(0, 1)
    np.testing.assert_array_equal(run(0, 1), bits)
    # 1024 draws of 32 bits: more than 99% distinct and each of the 32 bits
    # set in about half of them (a count of zeros fails both).
    self.assertGreater(len(np.unique(bits)), 0.99 * bits.size)
    ones = (np.asarray(bits)[..., None] >> np.arange(32)) & 1
    np.testing.assert_array_less(np.abs(ones.mean(axis=(0, 1)) - 0.5), 0.1)
    for seeds in [(1, 0), (0, 2), (-1, 1)]:
      other = run(*seeds)
      self.assertLess(np.mean(other == bits), 0.01, seeds)

  def test_state_carries_over_between_draws_and_grid_steps(self):
    # Seeded once, at the first grid step: every later draw, in this step or
    # the next, continues the sequence. Seeded again: the sequence restarts.
    def kernel(o_ref):
      @pl.when(pl.program_id(0) == 0)
      def _():
        pltpu.prng_seed(7)

      o_ref[0] = pltpu.prng_random_bits((8, 128))
      o_ref[1] = pltpu.prng_random_bits((8, 128))

    bits = pl.pallas_call(
        kernel,
        grid=(2,),
        out_specs=pl.BlockSpec((None, 2, 8, 128), lambda i: (i, 0, 0, 0)),
        out_shape=jax.ShapeDtypeStruct((2, 2, 8, 128), jnp.int32),
        interpret=pltpu.InterpretParams(),
    )()
    draws = np.asarray(bits).reshape(4, -1)
    # All four draws differ from one another.
    for i in range(4):
      for j in range(i):
        self.assertLess(np.mean(draws[i] == draws[j]), 0.01, (i, j))

    def reseeded(o_ref):
      pltpu.prng_seed(7)
      o_ref[0] = pltpu.prng_random_bits((8, 128))
      o_ref[1] = pltpu.prng_random_bits((8, 128))

    again = pl.pallas_call(
        reseeded,
        out_shape=jax.ShapeDtypeStruct((2, 8, 128), jnp.int32),
        interpret=pltpu.InterpretParams(),
    )()
    np.testing.assert_array_equal(again, bits[0])

  def test_each_core_has_its_own_state(self):
    # Both cores seed with the same seed and draw once; core 0 then draws
    # again. Each core's first draw is the same; core 0's second differs.
    @test_util.kernel(
        out_type=jax.ShapeDtypeStruct((3, 8, 128), jnp.int32),
        mesh=test_util.tensorcore_mesh(axis_name='core', num_cores=2),
        scratch_types=[pltpu.VMEM((8, 128), jnp.int32)],
        interpret=test_util.interpret_params(),
    )
    def kernel(o_ref, vmem_ref):
      core = jax.lax.axis_index('core')
      pltpu.prng_seed(3)
      vmem_ref[...] = pltpu.prng_random_bits((8, 128))
      pltpu.sync_copy(vmem_ref, o_ref.at[core])

      @pl.when(core == 0)
      def _():
        vmem_ref[...] = pltpu.prng_random_bits((8, 128))
        pltpu.sync_copy(vmem_ref, o_ref.at[2])

    bits = np.asarray(kernel())
    np.testing.assert_array_equal(bits[1], bits[0])
    self.assertLess(np.mean(bits[2] == bits[0]), 0.01)

  def test_stateful_uniform(self):
    # `pltpu.stateful_uniform` turns the bits into floats in [0, 1).
    def kernel(o_ref):
      pltpu.prng_seed(0)
      o_ref[...] = pltpu.stateful_uniform(shape=o_ref.shape)

    samples = np.asarray(pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((64, 128), jnp.float32),
        interpret=pltpu.InterpretParams(),
    )())
    self.assertTrue(np.all((samples >= 0) & (samples < 1)))
    # The mean of 8192 uniform samples is 0.5 within 4 standard deviations
    # (1 / sqrt(12 * 8192) ~ 0.0032).
    self.assertAlmostEqual(samples.mean(), 0.5, delta=0.013)


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
