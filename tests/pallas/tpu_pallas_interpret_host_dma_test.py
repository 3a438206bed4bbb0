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

"""Tests of DMAs between host memory and HBM in TPU interpret mode.

To work around https://github.com/jax-ml/jax/issues/25671 , this file
contains only tests that do not use shard_map.
"""

import functools

from absl.testing import absltest
import jax
from jax._src import test_util as jtu
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas import tpu_sc as plsc
import jax.numpy as jnp
import numpy as np
import tpu_interpret_test_util as test_util


jax.config.parse_flags_with_absl()


# TODO(jburnim): Figure out how to safely run different instance of TPU
# interpret mode in parallel, and then remove this decorator.
@jtu.thread_unsafe_test_class()
class InterpretHostDmaTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 11, 0):
      self.skipTest(
          'jax 0.10.x and older: Pallas has host memory DMAs from jax 0.11.0'
      )
    # Older jax releases: end.

  def _pinned_host_sharding(self):
    """Returns a sharding of the first device's pinned host memory."""
    return jax.sharding.NamedSharding(
        jax.sharding.Mesh(jax.devices()[:1], 'x'),
        jax.sharding.PartitionSpec(),
        memory_kind='pinned_host',
    )

  def _host_dma_kernel(self, body):
    """Runs `body` once on the scalar subcore of a TPU v6e's SparseCore."""
    with jax.sharding.use_abstract_mesh(
        jax.sharding.AbstractMesh((), (), abstract_device=test_util.tpu_v6e())
    ):
      mesh = plsc.ScalarSubcoreMesh(axis_name='core', num_cores=1)
    test_util.kernel(
        out_type=(), mesh=mesh, interpret=test_util.interpret_params()
    )(body)()

  def test_host_to_hbm_dma(self):
    x = np.arange(8 * 128, dtype=np.int32).reshape(8, 128)

    @jax.jit
    def f(x):
      x_ref = jax.new_ref(
          pltpu.with_memory_space_constraint(x, pl.HOST),
          memory_space=pl.HOST,
      )
      y_ref = pl.empty_ref_like(pltpu.HBM(x.shape, x.dtype))

      def body():
        pltpu.sync_copy(x_ref, y_ref)

      self._host_dma_kernel(body)
      return y_ref[...]

    out = jax.block_until_ready(f(jax.device_put(x, self._pinned_host_sharding())))
    np.testing.assert_array_equal(out, x)

  def test_hbm_to_host_dma(self):
    x = np.arange(8 * 128, dtype=np.float32).reshape(8, 128) / 7

    @functools.partial(jax.jit, out_shardings=self._pinned_host_sharding())
    def f(x):
      x_ref = jax.new_ref(x, memory_space=pltpu.HBM)
      y_ref = pl.empty_ref_like(
          pl.MemoryRef(jax.core.ShapedArray(x.shape, x.dtype), pl.HOST))

      def body():
        pltpu.sync_copy(x_ref, y_ref)

      self._host_dma_kernel(body)
      return pltpu.with_memory_space_constraint(y_ref[...], pl.HOST)

    out = jax.block_until_ready(f(x))
    self.assertEqual(out.sharding.memory_kind, 'pinned_host')
    np.testing.assert_array_equal(out, x)

  def test_async_dmas_of_slices_between_host_and_hbm(self):
    # Row i of the host array goes to row 7 - i of HBM, and row i of HBM back
    # to row i of the host array, each by its own DMA: the result in host
    # memory is the rows reversed, and HBM holds them reversed too.
    x = np.arange(8 * 128, dtype=np.int32).reshape(8, 128) * 3 - 500

    @functools.partial(jax.jit, out_shardings=(None, self._pinned_host_sharding()))
    def f(x):
      x_ref = jax.new_ref(
          pltpu.with_memory_space_constraint(x, pl.HOST),
          memory_space=pl.HOST,
      )
      y_ref = pl.empty_ref_like(pltpu.HBM(x.shape, x.dtype))

      def body():
        def scoped(sem):
          for i in range(8):
            pltpu.async_copy(x_ref.at[i], y_ref.at[7 - i], sem).wait()
          for i in range(8):
            pltpu.async_copy(y_ref.at[i], x_ref.at[i], sem).wait()

        pl.run_scoped(scoped, pltpu.SemaphoreType.DMA)

      self._host_dma_kernel(body)
      return y_ref[...], pltpu.with_memory_space_constraint(x_ref[...], pl.HOST)

    hbm, host = jax.block_until_ready(
        f(jax.device_put(x, self._pinned_host_sharding())))
    np.testing.assert_array_equal(hbm, x[::-1])
    np.testing.assert_array_equal(host, x[::-1])
    self.assertEqual(host.sharding.memory_kind, 'pinned_host')

  def test_pallas_call_dma_from_host_input(self):
    # A TensorCore kernel whose input is in host memory copies rows 8 to 15
    # of it to VMEM by DMA.
    x = np.arange(16 * 128, dtype=np.float32).reshape(16, 128)

    def kernel(x_host, o_hbm, buf):
      pltpu.sync_copy(x_host.at[pl.ds(8, 8)], buf)
      buf[...] = buf[...] * 2 + 1
      pltpu.sync_copy(buf, o_hbm)

    f = jax.jit(pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.HOST)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32)],
        interpret=test_util.interpret_params(),
    ))
    out = jax.block_until_ready(
        f(jax.device_put(x, self._pinned_host_sharding())))
    np.testing.assert_array_equal(out, x[8:] * 2 + 1)

  def test_load_from_host_input_raises(self):
    def kernel(x_host, o_ref):
      o_ref[...] = x_host[...]

    f = jax.jit(pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.HOST)],
        interpret=test_util.interpret_params(),
    ))
    x = jax.device_put(np.zeros((8, 128), np.float32),
                       self._pinned_host_sharding())
    with self.assertRaisesRegex(
        ValueError,
        'get_p: Buffers with a memory space of HOST cannot be referenced '
        'directly'):
      jax.block_until_ready(f(x))


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
