"""Views of refs (`ref.reshape`, `ref.bitcast`) in TPU interpret mode, jax 0.10.

The interpreter of jax 0.10 accesses a ref only through indexing: a kernel
that read, wrote or copied a view of a ref failed when it ran, with
`AttributeError: 'ReshapeTransform' object has no attribute 'indices'` in a
callback. Its series makes that a `NotImplementedError` naming the primitive
and the transform when the kernel is traced. jax 0.11.0 and newer run such
views (patch 0013, `tpu_pallas_interpret_ref_view_test.py`), which do not
carry to 0.10. Not exported upstream: upstream's newest interpreter has no
such release.
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


@jtu.thread_unsafe_test_class()
class InterpretRefViewUnsupportedTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    if not (0, 10, 0) <= jax.__version_info__ < (0, 11, 0):
      self.skipTest('only the series for jax 0.10 has this patch; 0.11.0 '
                    'and newer run views of refs (patch 0013)')

  def _call(self, kernel, x):
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        interpret=pltpu.InterpretParams(),
    )(x)

  def _dma_call(self, kernel, x):
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        scratch_shapes=[
            pltpu.VMEM((8, 128), jnp.float32),
            pltpu.SemaphoreType.DMA,
        ],
        interpret=pltpu.InterpretParams(),
    )(x)

  def test_load_through_reshape_raises(self):
    def kernel(x_ref, o_ref):
      o_ref[...] = x_ref.reshape(16, 64)[...].reshape(8, 128)

    with self.assertRaisesRegex(
        NotImplementedError, 'get of a ref with a ReshapeTransform transform'
    ):
      self._call(kernel, np.zeros((8, 128), np.float32))

  def test_store_through_bitcast_raises(self):
    def kernel(x_ref, o_ref):
      o_ref.bitcast(jnp.int32)[...] = pltpu.bitcast(x_ref[...], jnp.int32)

    with self.assertRaisesRegex(
        NotImplementedError, 'swap of a ref with a BitcastTransform transform'
    ):
      self._call(kernel, np.zeros((8, 128), np.float32))

  def test_dma_from_a_reshaped_ref_raises(self):
    def kernel(x_hbm_ref, o_ref, scratch_ref, sem):
      copy = pltpu.make_async_copy(x_hbm_ref.reshape(8, 128), scratch_ref, sem)
      copy.start()
      copy.wait()
      o_ref[...] = scratch_ref[...]

    with self.assertRaisesRegex(
        NotImplementedError,
        'dma_start of a ref with a ReshapeTransform transform',
    ):
      self._dma_call(kernel, np.zeros((4, 256), np.float32))

  def test_load_of_a_transposed_ref_raises(self):
    def kernel(x_ref, o_ref):
      o_ref[...] = x_ref.T[...]

    with self.assertRaisesRegex(
        NotImplementedError, 'get of a ref with a TransposeTransform transform'
    ):
      self._call(kernel, np.zeros((128, 128), np.float32))

  def test_indexed_refs_still_run(self):
    # Indexing (`NDIndexer`s) is what the interpreter supports: a DMA of a
    # slice of an HBM ref and a store to a slice of the output.
    x = np.arange(16 * 128, dtype=np.float32).reshape(16, 128)

    def kernel(x_hbm_ref, o_ref, scratch_ref, sem):
      copy = pltpu.make_async_copy(x_hbm_ref.at[8:16], scratch_ref, sem)
      copy.start()
      copy.wait()
      o_ref[...] = jnp.zeros_like(o_ref)
      o_ref[2:4, :] = scratch_ref[0:2, :] + 1.0

    expected = np.zeros((8, 128), np.float32)
    expected[2:4] = x[8:10] + 1.0
    np.testing.assert_array_equal(self._dma_call(kernel, x), expected)


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
