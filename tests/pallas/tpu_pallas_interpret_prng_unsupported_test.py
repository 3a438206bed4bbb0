"""`pltpu.prng_random_bits` in TPU interpret mode on jax 0.10.

The interpreter of jax 0.10 returned zeros from `pltpu.prng_random_bits`,
whatever the seed; its series makes that a `NotImplementedError` naming the
primitive. jax 0.11.0 and newer draw bits (patch 0009,
`tpu_pallas_interpret_prng_test.py`); the maintenance-only releases keep
their zeros. Not exported upstream: upstream's newest interpreter has no
such release.
"""

from absl.testing import absltest
import jax
from jax._src import test_util as jtu
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
import jax.numpy as jnp
import tpu_interpret_test_util as test_util


jax.config.parse_flags_with_absl()


@jtu.thread_unsafe_test_class()
class InterpretPrngUnsupportedTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    if not (0, 10, 0) <= jax.__version_info__ < (0, 11, 0):
      self.skipTest('only the series for jax 0.10 has this patch; 0.11.0 '
                    'and newer draw random bits (patch 0009)')

  def _run(self, kernel):
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        interpret=pltpu.InterpretParams(),
    )()

  def test_random_bits_raise(self):
    def kernel(o_ref):
      pltpu.prng_seed(7)
      o_ref[...] = pltpu.bitcast(pltpu.prng_random_bits(o_ref.shape),
                                 jnp.float32)

    with self.assertRaisesRegex(NotImplementedError,
                                'pltpu.prng_random_bits is not implemented'):
      self._run(kernel)

  def test_seed_alone_runs(self):
    def kernel(o_ref):
      pltpu.prng_seed(7)
      o_ref[...] = jnp.full(o_ref.shape, 2.0, jnp.float32)

    self.assertEqual(float(self._run(kernel).sum()), 2.0 * 8 * 128)


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
