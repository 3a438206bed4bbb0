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

"""Tests of the TPU that TPU interpret mode simulates (`device_kind`).

`InterpretParams(device_kind=...)` makes `pltpu.get_tpu_info()`, the meshes,
`emit_pipeline` and padded buffer bounds see a TPU of that kind on CPU, as
`jax.sharding.use_abstract_mesh` with a TPU `AbstractDevice` does. The
expected values are the TPU generations and core counts of the device kinds
(TPU v5e: generation 5, 1 TensorCore; TPU v5p: generation 5, 2 TensorCores
with megacore; TPU v6e: generation 6, 1 TensorCore, 2 SparseCores of 16
vector subcores) and numpy.

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
class InterpretSimulatedTpuTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 10, 1):
      self.skipTest(
          'jax 0.10.0 and older: their series have no simulated TPU patch'
      )
    # Older jax releases: end.

  @parameterized.parameters(
      ('TPU v5 lite', 1, 5),
      ('TPU v5p', 2, 5),
      ('TPU v6 lite', 1, 6),
  )
  def test_get_tpu_info_sees_the_simulated_tpu(
      self, device_kind, num_cores, generation
  ):
    params = test_util.interpret_params(
        device_kind=device_kind, num_cores_or_threads=num_cores
    )

    def kernel(x_ref, o_ref):
      o_ref[...] = x_ref[...] + pltpu.get_tpu_info().generation

    x = np.arange(8 * 128, dtype=np.int32).reshape(8, 128)
    with pltpu.force_tpu_interpret_mode(params):
      info = pltpu.get_tpu_info()
      out = pl.pallas_call(
          kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype)
      )(x)

    self.assertEqual(info.generation, generation)
    self.assertEqual(info.num_cores, num_cores)
    np.testing.assert_array_equal(out, x + generation)

  def test_without_device_kind_nothing_is_simulated(self):
    with pltpu.force_tpu_interpret_mode(test_util.interpret_params()):
      with self.assertRaisesRegex(ValueError, 'Unsupported TPU device kind'):
        pltpu.get_tpu_info()

  def test_unknown_device_kind_raises(self):
    with self.assertRaisesRegex(
        ValueError, "Unsupported TPU device kind: 'TPU v1000'"
    ):
      pltpu.InterpretParams(device_kind='TPU v1000')

  def test_tensorcore_mesh_has_the_cores_of_the_simulated_tpu(self):
    params = test_util.interpret_params(
        device_kind='TPU v5p', num_cores_or_threads=2
    )
    with pltpu.force_tpu_interpret_mode(params):
      # Older jax releases: begin.
      # At jax HEAD: mesh = pltpu.TensorCoreMesh(axis_name='core')
      if hasattr(pltpu, 'TensorCoreMesh'):
        mesh = pltpu.TensorCoreMesh(axis_name='core')
      else:
        mesh = pltpu.create_tensorcore_mesh('core')
      # Older jax releases: end.

      @test_util.kernel(
          out_type=jax.ShapeDtypeStruct((2, 8, 128), jnp.int32),
          mesh=mesh,
          scratch_types=[pltpu.VMEM((8, 128), jnp.int32)],
      )
      def kernel(o_hbm_ref, scratch_ref):
        core = jax.lax.axis_index('core')
        scratch_ref[...] = jnp.full((8, 128), 10 * core + 1, jnp.int32)
        pltpu.sync_copy(scratch_ref, o_hbm_ref.at[core])

      out = kernel()

    self.assertEqual(dict(mesh.shape), {'core': 2})
    np.testing.assert_array_equal(
        out, np.broadcast_to(np.array([1, 11])[:, None, None], (2, 8, 128))
    )

  def test_sparsecore_mesh_has_the_sparsecores_of_the_simulated_tpu(self):
    params = test_util.interpret_params(device_kind='TPU v6 lite')
    with pltpu.force_tpu_interpret_mode(params):
      mesh = plsc.VectorSubcoreMesh(
          core_axis_name='core', subcore_axis_name='subcore'
      )
      sparse_core = pltpu.get_tpu_info().sparse_core
    self.assertEqual(dict(mesh.shape), {'core': 2, 'subcore': 16})
    self.assertEqual(sparse_core.num_lanes, 8)

  def test_emit_pipeline_sees_the_simulated_tpu(self):
    # emit_pipeline asks the TPU for its tiling to slice each block. The last
    # block (rows 256 to 299) is ragged: it is copied as rows 256 to 303,
    # whole (8, 128) tiles, which the padded buffer bounds allow.
    def kernel(x_hbm_ref, o_hbm_ref):
      def body(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2

      pltpu.emit_pipeline(
          body,
          grid=(3,),
          in_specs=[pl.BlockSpec((128, 128), lambda i: (i, 0))],
          out_specs=pl.BlockSpec((128, 128), lambda i: (i, 0)),
      )(x_hbm_ref, o_hbm_ref)

    def run(x):
      return pl.pallas_call(
          kernel,
          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
          in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
          out_specs=pl.BlockSpec(memory_space=pl.ANY),
      )(x)

    x = np.arange(300 * 128, dtype=np.float32).reshape(300, 128)
    params = test_util.interpret_params(
        device_kind='TPU v6 lite', buffer_bounds='padded'
    )
    with pltpu.force_tpu_interpret_mode(params):
      out = run(x)
    np.testing.assert_array_equal(out, x * 2)

    with pltpu.force_tpu_interpret_mode(test_util.interpret_params()):
      with self.assertRaisesRegex(ValueError, 'Unsupported TPU device kind'):
        run(x)

  def test_padded_buffer_bounds_of_the_simulated_tpu(self):
    # As upstream's test_out_of_bounds_write_range, with the TPU given by
    # `device_kind` instead of `jax.sharding.use_abstract_mesh`: the (10, 128)
    # float32 scratch is padded to (16, 128) on a TPU v6e.
    def kernel(x_ref, o_ref, s_ref):
      pltpu.sync_copy(x_ref, s_ref.at[pl.ds(jnp.int32(4), 8)])
      o_ref[...] = s_ref[pl.ds(jnp.int32(4), 8)]

    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        scratch_shapes=[pltpu.VMEM((10, 128), jnp.float32)],
        interpret=test_util.interpret_params(
            buffer_bounds='padded', device_kind='TPU v6 lite'
        ),
    )(jnp.zeros((8, 128), jnp.float32))

    out = np.asarray(out)
    np.testing.assert_array_equal(out[:6], 0.0)
    self.assertTrue(np.isnan(out[6:]).all())

  def test_set_tpu_interpret_mode_simulates_until_reset(self):
    pltpu.set_tpu_interpret_mode(
        test_util.interpret_params(device_kind='TPU v6 lite')
    )
    try:
      generation = pltpu.get_tpu_info().generation
    finally:
      pltpu.set_tpu_interpret_mode(None)
    self.assertEqual(generation, 6)
    with self.assertRaisesRegex(ValueError, 'Unsupported TPU device kind'):
      pltpu.get_tpu_info()


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
