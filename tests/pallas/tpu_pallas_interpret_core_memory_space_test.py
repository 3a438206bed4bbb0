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

"""Tests refs in memory spaces tied to a mesh in TPU interpret mode.

`pltpu.VMEM(...) @ mesh` (and SMEM, semaphores) is memory of the mesh's
cores. In a kernel on that mesh Mosaic lowers it as the plain memory space
(`memory_space_to_tpu_memory_space`); TPU interpret mode does the same, and
raises `NotImplementedError` for memory of cores of another type. Values are
checked against numpy.

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
class InterpretCoreMemorySpaceTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 10, 1):
      self.skipTest(
          'jax 0.10.0 and older: no memory spaces tied to a mesh (`@ mesh`)'
      )
    # Older jax releases: end.

  def test_tensor_core_memory_of_the_mesh(self):
    # Each of 2 TensorCores copies its block into VMEM @ mesh with a DMA
    # semaphore @ mesh, adds a scalar from SMEM @ mesh in a buffer that
    # `run_scoped` allocates in VMEM @ mesh, and copies the sum out.
    x = np.arange(2 * 8 * 128, dtype=np.float32).reshape(2, 8, 128)
    mesh = test_util.tensorcore_mesh(axis_name='core', num_cores=2)

    @test_util.kernel(
        out_type=jax.ShapeDtypeStruct(x.shape, jnp.float32),
        mesh=mesh,
        scratch_types=[
            pltpu.VMEM((8, 128), jnp.float32) @ mesh,
            pltpu.SMEM((1,), jnp.float32) @ mesh,
            pltpu.SemaphoreType.DMA @ mesh,
        ],
        interpret=test_util.interpret_params(),
    )
    def kernel(x_hbm, o_hbm, vmem, smem, sem):
      core = jax.lax.axis_index('core')
      pltpu.async_copy(x_hbm.at[core], vmem, sem).wait()
      smem[0] = (10 * core).astype(jnp.float32)

      def body(tmp):
        tmp[...] = vmem[...] + smem[0]
        pltpu.sync_copy(tmp, o_hbm.at[core])

      pl.run_scoped(body, pltpu.VMEM((8, 128), jnp.float32) @ mesh)

    np.testing.assert_array_equal(
        kernel(x), x + np.array([0, 10], np.float32)[:, None, None]
    )

  def test_sparse_core_memory_of_the_mesh(self):
    # Every subcore of a SparseCore of a TPU v6e has its own VMEM @ mesh.
    device = test_util.tpu_v6e()
    self.enter_context(jax.sharding.use_abstract_mesh(
        jax.sharding.AbstractMesh((), (), abstract_device=device)))
    mesh = plsc.VectorSubcoreMesh(
        core_axis_name='core', subcore_axis_name='subcore', num_cores=1
    )
    lanes = plsc.get_sparse_core_info().num_lanes
    x = np.arange(lanes, dtype=np.int32)

    @test_util.kernel(
        out_type=jax.ShapeDtypeStruct((mesh.num_subcores, lanes), jnp.int32),
        mesh=mesh,
        scratch_types=[pltpu.VMEM((lanes,), jnp.int32) @ mesh],
        interpret=test_util.interpret_params(),
    )
    def kernel(x_hbm, o_hbm, vmem):
      subcore = jax.lax.axis_index('subcore')
      pltpu.sync_copy(x_hbm, vmem)
      vmem[...] = vmem[...] + subcore
      pltpu.sync_copy(vmem, o_hbm.at[subcore])

    np.testing.assert_array_equal(
        kernel(x), x + np.arange(mesh.num_subcores)[:, None]
    )

  @parameterized.parameters('scratch', 'empty_ref')
  def test_memory_of_cores_of_another_type_raises(self, allocated_by):
    device = test_util.tpu_v6e()
    self.enter_context(jax.sharding.use_abstract_mesh(
        jax.sharding.AbstractMesh((), (), abstract_device=device)))
    tensor_core_mesh = test_util.tensorcore_mesh(axis_name='core', num_cores=1)
    vmem = pltpu.VMEM((8,), jnp.int32) @ tensor_core_mesh

    @test_util.kernel(
        out_type=jax.ShapeDtypeStruct((8,), jnp.int32),
        mesh=plsc.VectorSubcoreMesh(
            core_axis_name='core', subcore_axis_name='subcore', num_cores=1
        ),
        scratch_types=[vmem] if allocated_by == 'scratch' else [],
        interpret=test_util.interpret_params(),
    )
    def kernel(o_hbm, *scratch):
      if allocated_by == 'scratch':
        (ref,) = scratch
      else:
        ref = jax.empty_ref(
            jax.ShapeDtypeStruct((8,), jnp.int32),
            memory_space=vmem.memory_space,
        )
      pltpu.sync_copy(ref, o_hbm)

    with self.assertRaisesRegex(
        NotImplementedError,
        r'VMEM@TC, memory of TC cores, in a kernel on SC_VECTOR_SUBCORE',
    ):
      jax.block_until_ready(kernel())


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
