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

"""Tests that SparseCore kernels Mosaic cannot lower fail in interpret mode.

Mosaic's SparseCore lowering loads and stores nothing in HBM or VMEM_SHARED,
scalars only in SMEM and vectors only in the other memory spaces, with unit
strides only and no integer index after a slice of more than one element,
and takes a forward cumsum of a vector only. TPU interpret mode raises the
same `NotImplementedError`; the forms it accepts run, with values checked
against numpy. The kernels run on subcore 0 of a TPU v6e SparseCore,
described by an abstract mesh, on CPU.

To work around https://github.com/jax-ml/jax/issues/25671 , this file
contains only tests that do not use shard_map.
"""

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
class InterpretSparseCoreLoweringTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 11, 0):
      self.skipTest(
          'jax 0.10.2 and older: their series have no patch for the errors'
          " of Mosaic's SparseCore lowering"
      )
    # Older jax releases: end.

  def _run_lowering_check_kernel(self, body, x, *scratch_types):
    """Runs `body(x_vmem, o_vmem, *scratch)` on subcore 0 of a SparseCore.

    Args:
      body: Reads `x_vmem` (a copy of `x` in VMEM) and writes `o_vmem` (int32
        of `x`'s shape, in VMEM, copied out at the end).
      x: A 1-D int32 numpy array.
      *scratch_types: More scratch buffers, passed to `body` after `o_vmem`.

    Returns:
      The output, a numpy array.
    """

    @test_util.kernel(
        out_type=jax.ShapeDtypeStruct(x.shape, jnp.int32),
        mesh=plsc.VectorSubcoreMesh(
            core_axis_name='core', subcore_axis_name='subcore', num_cores=1
        ),
        scratch_types=(
            pltpu.VMEM(x.shape, jnp.int32),
            pltpu.VMEM(x.shape, jnp.int32),
            *scratch_types,
        ),
        interpret=test_util.interpret_params(),
    )
    def kernel(x_hbm, o_hbm, x_vmem, o_vmem, *scratch):
      @pl.when(jax.lax.axis_index('subcore') == 0)
      def _():
        pltpu.sync_copy(x_hbm, x_vmem)
        body(x_vmem, o_vmem, *scratch)
        pltpu.sync_copy(o_vmem, o_hbm)

    return np.asarray(jax.block_until_ready(kernel(x)))

  def _lowering_check_lanes(self):
    """Makes the test's kernels see a TPU v6e; returns its SparseCore lanes."""
    self.enter_context(jax.sharding.use_abstract_mesh(
        jax.sharding.AbstractMesh((), (), abstract_device=test_util.tpu_v6e())))
    return plsc.get_sparse_core_info().num_lanes

  def test_load_from_and_store_to_hbm_raise(self):
    # A SparseCore kernel copies HBM to VMEM first: Mosaic's SparseCore
    # lowering raises NotImplementedError for a load or store of HBM (a
    # TensorCore kernel gets the interpreter's ValueError).
    x = np.arange(self._lowering_check_lanes(), dtype=np.int32)

    def run(body):
      @test_util.kernel(
          out_type=jax.ShapeDtypeStruct(x.shape, jnp.int32),
          mesh=plsc.VectorSubcoreMesh(
              core_axis_name='core', subcore_axis_name='subcore', num_cores=1
          ),
          scratch_types=(pltpu.VMEM(x.shape, jnp.int32),),
          interpret=test_util.interpret_params(),
      )
      def kernel(x_hbm, o_hbm, vmem):
        @pl.when(jax.lax.axis_index('subcore') == 0)
        def _():
          body(x_hbm, o_hbm, vmem)

      return jax.block_until_ready(kernel(x))

    def load(x_hbm, o_hbm, vmem):
      vmem[...] = x_hbm[...]
      pltpu.sync_copy(vmem, o_hbm)

    def store(x_hbm, o_hbm, vmem):
      pltpu.sync_copy(x_hbm, vmem)
      o_hbm[...] = vmem[...]

    with self.assertRaisesRegex(
        NotImplementedError, 'Get does not support loading from HBM'):
      run(load)
    with self.assertRaisesRegex(
        NotImplementedError, 'Swap does not support storing to HBM'):
      run(store)

  def test_scalar_load_from_vmem_raises(self):
    x = np.arange(self._lowering_check_lanes(), dtype=np.int32)

    def body(x_vmem, o_vmem):
      o_vmem[...] = jnp.broadcast_to(x_vmem[1], o_vmem.shape)

    with self.assertRaisesRegex(
        NotImplementedError, 'Get only supports loading scalars from SMEM. To'
        ' load a scalar from VMEM'):
      self._run_lowering_check_kernel(body, x)

  def test_scalar_store_to_vmem_raises(self):
    x = np.arange(self._lowering_check_lanes(), dtype=np.int32)

    def body(x_vmem, o_vmem):
      o_vmem[...] = x_vmem[...]
      o_vmem[0] = jnp.int32(7)

    with self.assertRaisesRegex(
        NotImplementedError, 'Trying to swap a scalar in VMEM'):
      self._run_lowering_check_kernel(body, x)

  def test_vector_load_from_smem_raises(self):
    x = np.arange(self._lowering_check_lanes(), dtype=np.int32)

    def body(x_vmem, o_vmem, s_smem):
      del x_vmem
      o_vmem[...] = s_smem[...]

    with self.assertRaisesRegex(
        NotImplementedError, 'Trying to load an array of shape'):
      self._run_lowering_check_kernel(body, x, pltpu.SMEM(x.shape, jnp.int32))

  def test_scalars_in_smem_and_vectors_in_vmem(self):
    # What Mosaic lowers: scalars loaded and stored in SMEM, a vector loaded
    # from VMEM and one of its elements extracted.
    lanes = self._lowering_check_lanes()
    x = np.arange(lanes, dtype=np.int32) * 3 + 1

    def body(x_vmem, o_vmem, s_smem):
      v = x_vmem[...]
      s_smem[0] = v[2]
      s_smem[1] = s_smem[0] * 10
      o_vmem[...] = v + s_smem[1]

    out = self._run_lowering_check_kernel(body, x, pltpu.SMEM((2,), jnp.int32))
    np.testing.assert_array_equal(out, x + x[2] * 10)

  def test_vmem_shared_load_raises(self):
    x = np.arange(self._lowering_check_lanes(), dtype=np.int32)

    def body(x_vmem, o_vmem, shared):
      del x_vmem
      o_vmem[...] = shared[...]

    with self.assertRaisesRegex(
        NotImplementedError,
        'Get does not support loading from VMEM_SHARED'):
      self._run_lowering_check_kernel(
          body, x, pltpu.VMEM_SHARED(x.shape, jnp.int32))

  def test_column_write_raises(self):
    # An integer index after a slice of more than one element: a column.
    lanes = self._lowering_check_lanes()
    x = np.arange(lanes, dtype=np.int32)

    def body(x_vmem, o_vmem, two_d):
      two_d[:, 1] = x_vmem[...]
      o_vmem[...] = x_vmem[...]

    with self.assertRaisesRegex(
        NotImplementedError,
        'Integer indexing of refs that follows a non-trivial slice is not'
        ' supported on SC'):
      self._run_lowering_check_kernel(
          body, x, pltpu.VMEM((lanes, 4), jnp.int32))

  def test_row_write_and_read(self):
    # An integer index before the slice: a row, which Mosaic lowers.
    lanes = self._lowering_check_lanes()
    x = np.arange(lanes, dtype=np.int32)

    def body(x_vmem, o_vmem, two_d):
      for i in range(3):
        two_d[i, :] = x_vmem[...] * (i + 1)
      o_vmem[...] = two_d[2, :] - two_d[0, :]

    out = self._run_lowering_check_kernel(body, x, pltpu.VMEM((3, lanes), jnp.int32))
    np.testing.assert_array_equal(out, x * 2)

  def test_strided_load_raises(self):
    lanes = self._lowering_check_lanes()
    x = np.arange(lanes, dtype=np.int32)

    def body(x_vmem, o_vmem, wide):
      del x_vmem
      o_vmem[...] = wide[pl.ds(0, lanes, stride=2)]

    with self.assertRaisesRegex(
        NotImplementedError,
        r'Get only supports slices with stride 1, got \[2\]'):
      self._run_lowering_check_kernel(
          body, x, pltpu.VMEM((2 * lanes,), jnp.int32))

  def test_cumsum_of_2d_raises(self):
    lanes = self._lowering_check_lanes()
    x = np.arange(lanes, dtype=np.int32)

    def body(x_vmem, o_vmem):
      o_vmem[...] = jnp.cumsum(
          x_vmem[...].reshape(2, lanes // 2), axis=0).reshape(-1)

    with self.assertRaisesRegex(NotImplementedError, 'must be rank 1'):
      self._run_lowering_check_kernel(body, x)

  def test_reverse_cumsum_raises(self):
    x = np.arange(self._lowering_check_lanes(), dtype=np.int32)

    def body(x_vmem, o_vmem):
      o_vmem[...] = jax.lax.cumsum(x_vmem[...], reverse=True)

    with self.assertRaisesRegex(
        NotImplementedError, 'reverse=True is not yet supported'):
      self._run_lowering_check_kernel(body, x)

  def test_cumsum_of_vector(self):
    x = np.arange(self._lowering_check_lanes(), dtype=np.int32) * 2 - 5

    def body(x_vmem, o_vmem):
      o_vmem[...] = jnp.cumsum(x_vmem[...])

    out = self._run_lowering_check_kernel(body, x)
    np.testing.assert_array_equal(out, np.cumsum(x))


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
