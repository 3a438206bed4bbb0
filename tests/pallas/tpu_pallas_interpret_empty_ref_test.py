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

"""Tests for `jax.empty_ref` in kernels in TPU interpret mode.

Mosaic lowers `jax.empty_ref` in a kernel to a buffer on the stack of the
enclosing region (`_alloc_value`, a `memref.alloca`). The expected values
are computed with numpy.

To work around https://github.com/jax-ml/jax/issues/25671 , this file
contains only tests that do not use shard_map.
"""

from absl.testing import absltest
from absl.testing import parameterized
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
class InterpretEmptyRefTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 10, 1):
      self.skipTest(
          'jax 0.10.0 and older: their series have no patch for'
          ' `jax.empty_ref` in kernels'
      )
    # Older jax releases: end.

  def test_empty_ref_in_vmem_and_smem(self):
    def kernel(x_ref, o_ref):
      t = jax.empty_ref(
          jax.ShapeDtypeStruct(x_ref.shape, x_ref.dtype),
          memory_space=pltpu.VMEM,
      )
      s = jax.empty_ref(
          jax.ShapeDtypeStruct((1,), jnp.float32), memory_space=pltpu.SMEM
      )
      t[...] = x_ref[...] * 2.0
      s[0] = pl.program_id(0).astype(jnp.float32) + 3.0
      o_ref[...] = t[...] + s[0]

    x = np.arange(8 * 256, dtype=np.float32).reshape(8, 256)
    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(2,),
        in_specs=[pl.BlockSpec((8, 128), lambda i: (0, i))],
        out_specs=pl.BlockSpec((8, 128), lambda i: (0, i)),
        interpret=test_util.interpret_params(),
    )(x)
    expected = x * 2.0 + np.repeat([3.0, 4.0], 128)[None, :]
    np.testing.assert_array_equal(out, expected)

  def test_empty_ref_in_loop_body_is_uninitialized_each_iteration(self):
    # The buffer lives until the end of its region: the loop body. Each
    # iteration reads it before writing it, so with the default
    # `uninitialized_memory='nan'` each read is NaN.
    def kernel(o_ref):
      def body(i, carry):
        t = jax.empty_ref(
            jax.ShapeDtypeStruct((8, 128), jnp.float32),
            memory_space=pltpu.VMEM,
        )
        nan_before_write = jnp.isnan(t[0, 0])
        t[...] = jnp.full((8, 128), i, jnp.float32)
        return carry + nan_before_write.astype(jnp.int32)
      o_ref[0] = jax.lax.fori_loop(0, 5, body, jnp.int32(0))

    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((1,), jnp.int32),
        out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),
        interpret=test_util.interpret_params(),
    )()
    self.assertEqual(int(out[0]), 5)

  def test_empty_ref_in_hbm_is_an_error(self):
    def kernel(o_ref):
      t = jax.empty_ref(
          jax.ShapeDtypeStruct((8, 128), jnp.float32),
          memory_space=pltpu.HBM,
      )
      pltpu.sync_copy(t, o_ref)

    with self.assertRaisesRegex(
        ValueError, 'Cannot allocate HBM with `jax.empty_ref`'
    ):
      pl.pallas_call(
          kernel,
          out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
          interpret=test_util.interpret_params(),
      )()

  @parameterized.parameters('vmem', 'smem')
  def test_empty_ref_on_sparsecore_vector_subcore(self, memory_space):
    self.enter_context(jax.sharding.use_abstract_mesh(
        jax.sharding.AbstractMesh((), (), abstract_device=test_util.tpu_v6e())))
    space = pltpu.VMEM if memory_space == 'vmem' else pltpu.SMEM

    @test_util.kernel(
        out_type=jax.ShapeDtypeStruct((8,), jnp.float32),
        mesh=plsc.VectorSubcoreMesh(
            core_axis_name='core', subcore_axis_name='subcore', num_cores=1
        ),
        scratch_types=(pltpu.VMEM((8,), jnp.float32),),
        interpret=test_util.interpret_params(),
    )
    def kernel(o_hbm, o_vmem):
      @pl.when(jax.lax.axis_index('subcore') == 0)
      def _():
        x_ref = jax.empty_ref(
            jax.ShapeDtypeStruct((8,), jnp.float32), memory_space=space
        )
        if space == pltpu.VMEM:
          x_ref[...] = jnp.full((8,), 1.5, jnp.float32)
          o_vmem[...] = 4.0 * x_ref[...]
        else:
          x_ref[0] = 1.5
          o_vmem[...] = jnp.broadcast_to(4.0 * x_ref[0], (8,))
        pltpu.sync_copy(o_vmem, o_hbm)

    np.testing.assert_array_equal(
        np.asarray(kernel()), np.full((8,), 6.0, np.float32)
    )


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
