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

"""Tests for SparseCore gathers and scatters by DMA in TPU interpret mode.

`pltpu.sync_copy(x_hbm_ref.at[indices], o_ref)` gathers the rows
`indices` of `x_hbm_ref` (Mosaic's `tpu.enqueue_indirect_dma`), and
`pltpu.sync_copy(x_ref, o_hbm_ref.at[indices])` scatters to them; the
indices are an array, a ref or `plsc.Indices`. The expected values are
computed here with numpy. The kernels run on SparseCore subcores of a TPU
v6e, described by an abstract mesh, on CPU.

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
from tpu_interpret_test_util import mosaic_interpret


jax.config.parse_flags_with_absl()


# TODO(jburnim): Figure out how to safely run different instance of TPU
# interpret mode in parallel, and then remove this decorator.
@jtu.thread_unsafe_test_class()
class InterpretSparseCoreGatherTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 11, 0):
      self.skipTest(
          'jax 0.10.2 and older: their series have no patch for SparseCore'
          ' gathers and scatters by DMA'
      )
    # Older jax releases: end.

  def _run_gather_kernel(self, out_type, scratch_types, body, *inputs,
                         detect_races=False):
    """Runs `body(*input_refs, out_ref, *scratch_refs)` on SparseCore 0."""
    self.enter_context(jax.sharding.use_abstract_mesh(
        jax.sharding.AbstractMesh((), (), abstract_device=test_util.tpu_v6e())))
    kernel = test_util.kernel(
        out_type=out_type,
        mesh=plsc.VectorSubcoreMesh(
            core_axis_name='core', subcore_axis_name='subcore', num_cores=1
        ),
        scratch_types=tuple(scratch_types),
        interpret=test_util.interpret_params(
            detect_races=detect_races, on_race='warn'
        ),
    )(body)
    return np.asarray(jax.block_until_ready(kernel(*inputs)))

  @parameterized.parameters('ref', 'array', 'indices')
  def test_gather_rows(self, kind):
    x = np.arange(16 * 8, dtype=np.int32).reshape(16, 8)
    idx = np.array([3, 15, 0, 7, 7, 2, 9, 1], np.int32)

    def body(x_hbm, idx_hbm, o_hbm, idx_vmem, o_vmem):
      @pl.when(jax.lax.axis_index('subcore') == 0)
      def _():
        pltpu.sync_copy(idx_hbm, idx_vmem)
        indices = {
            'ref': idx_vmem,
            'array': idx_vmem[...],
            'indices': plsc.Indices(idx_vmem),
        }[kind]
        pltpu.sync_copy(x_hbm.at[indices], o_vmem)
        pltpu.sync_copy(o_vmem, o_hbm)

    out = self._run_gather_kernel(
        jax.ShapeDtypeStruct((8, 8), jnp.int32),
        [pltpu.VMEM((8,), jnp.int32), pltpu.VMEM((8, 8), jnp.int32)],
        body, x, idx)
    np.testing.assert_array_equal(out, x[idx])

  def test_gather_with_ignored_value_keeps_destination(self):
    x = np.arange(16, dtype=np.int32) * 10
    idx = np.array([4, 1, 13, 4, 0, 4, 6, 2], np.int32)

    def body(x_hbm, idx_hbm, o_hbm, idx_vmem, o_vmem):
      @pl.when(jax.lax.axis_index('subcore') == 0)
      def _():
        pltpu.sync_copy(idx_hbm, idx_vmem)
        o_vmem[...] = jnp.full((8,), -1, jnp.int32)
        pltpu.sync_copy(
            x_hbm.at[plsc.Indices(idx_vmem, ignored_value=4)], o_vmem)
        pltpu.sync_copy(o_vmem, o_hbm)

    out = self._run_gather_kernel(
        jax.ShapeDtypeStruct((8,), jnp.int32),
        [pltpu.VMEM((8,), jnp.int32), pltpu.VMEM((8,), jnp.int32)],
        body, x, idx)
    np.testing.assert_array_equal(out, np.where(idx == 4, -1, x[idx]))

  def test_gather_from_indexed_ref_with_column_slice(self):
    x = np.arange(2 * 16 * 8, dtype=np.int32).reshape(2, 16, 8)
    idx = np.array([5, 0, 14, 3, 3, 8, 11, 1, 0, 0, 0, 0], np.int32)

    def body(x_hbm, idx_hbm, o_hbm, idx_vmem, o_vmem):
      @pl.when(jax.lax.axis_index('subcore') == 0)
      def _():
        pltpu.sync_copy(idx_hbm, idx_vmem)
        pltpu.sync_copy(
            x_hbm.at[1].at[idx_vmem.at[pl.ds(0, 8)], pl.ds(2, 4)], o_vmem)
        pltpu.sync_copy(o_vmem, o_hbm)

    out = self._run_gather_kernel(
        jax.ShapeDtypeStruct((8, 4), jnp.int32),
        [pltpu.VMEM((12,), jnp.int32), pltpu.VMEM((8, 4), jnp.int32)],
        body, x, idx)
    np.testing.assert_array_equal(out, x[1][idx[:8], 2:6])

  @parameterized.parameters(False, True)
  def test_scatter_rows(self, add):
    x = np.arange(8 * 4, dtype=np.float32).reshape(8, 4)
    idx = np.array([9, 2, 0, 15, 4, 11, 6, 13], np.int32)
    init = np.full((16, 4), 100, np.float32)

    def body(x_hbm, idx_hbm, init_hbm, o_hbm, idx_vmem, x_vmem):
      @pl.when(jax.lax.axis_index('subcore') == 0)
      def _():
        pltpu.sync_copy(idx_hbm, idx_vmem)
        pltpu.sync_copy(x_hbm, x_vmem)
        pltpu.sync_copy(init_hbm, o_hbm)
        pltpu.sync_copy(x_vmem, o_hbm.at[idx_vmem], add=add)

    out = self._run_gather_kernel(
        jax.ShapeDtypeStruct((16, 4), jnp.float32),
        [pltpu.VMEM((8,), jnp.int32), pltpu.VMEM((8, 4), jnp.float32)],
        body, x, idx, init)
    expected = init.copy()
    if add:
      np.add.at(expected, idx, x)
    else:
      expected[idx] = x
    np.testing.assert_array_equal(out, expected)

  def test_scatter_with_ignored_value_writes_nothing_there(self):
    x = np.arange(8, dtype=np.int32) + 1
    idx = np.array([0, 7, 3, 7, 5, 1, 7, 2], np.int32)

    def body(x_hbm, idx_hbm, o_hbm, idx_vmem, x_vmem, zeros_vmem):
      @pl.when(jax.lax.axis_index('subcore') == 0)
      def _():
        pltpu.sync_copy(idx_hbm, idx_vmem)
        pltpu.sync_copy(x_hbm, x_vmem)
        zeros_vmem[...] = jnp.zeros((8,), jnp.int32)
        pltpu.sync_copy(zeros_vmem, o_hbm)
        pltpu.sync_copy(
            x_vmem, o_hbm.at[plsc.Indices(idx_vmem, ignored_value=7)])

    out = self._run_gather_kernel(
        jax.ShapeDtypeStruct((8,), jnp.int32),
        [pltpu.VMEM((8,), jnp.int32)] * 3,
        body, x, idx)
    expected = np.zeros(8, np.int32)
    expected[idx[idx != 7]] = x[idx != 7]
    np.testing.assert_array_equal(out, expected)

  def test_gather_add(self):
    x = np.arange(16, dtype=np.int32)
    idx = np.array([1, 1, 3, 5, 8, 13, 0, 15], np.int32)

    def body(x_hbm, idx_hbm, o_hbm, idx_vmem, o_vmem):
      @pl.when(jax.lax.axis_index('subcore') == 0)
      def _():
        pltpu.sync_copy(idx_hbm, idx_vmem)
        o_vmem[...] = jnp.full((8,), 1000, jnp.int32)
        pltpu.sync_copy(x_hbm.at[idx_vmem], o_vmem, add=True)
        pltpu.sync_copy(o_vmem, o_hbm)

    out = self._run_gather_kernel(
        jax.ShapeDtypeStruct((8,), jnp.int32),
        [pltpu.VMEM((8,), jnp.int32), pltpu.VMEM((8,), jnp.int32)],
        body, x, idx)
    np.testing.assert_array_equal(out, 1000 + x[idx])

  def test_gather_out_of_bounds_index_raises(self):
    x = np.arange(16, dtype=np.int32)
    idx = np.array([0, 1, 2, 16, 4, 5, 6, 7], np.int32)

    def body(x_hbm, idx_hbm, o_hbm, idx_vmem, o_vmem):
      @pl.when(jax.lax.axis_index('subcore') == 0)
      def _():
        pltpu.sync_copy(idx_hbm, idx_vmem)
        pltpu.sync_copy(x_hbm.at[idx_vmem], o_vmem)
        pltpu.sync_copy(o_vmem, o_hbm)

    with self.assertRaisesRegex(Exception, 'Out-of-bounds read'):
      self._run_gather_kernel(
          jax.ShapeDtypeStruct((8,), jnp.int32),
          [pltpu.VMEM((8,), jnp.int32), pltpu.VMEM((8,), jnp.int32)],
          body, x, idx)

  def test_gather_into_indexed_destination_raises(self):
    x = np.arange(8, dtype=np.int32)

    def body(x_hbm, o_hbm, idx_vmem, o_vmem):
      pltpu.sync_copy(x_hbm.at[idx_vmem], o_vmem.at[idx_vmem])

    with self.assertRaisesRegex(ValueError, 'source ref can be indexed'):
      self._run_gather_kernel(
          jax.ShapeDtypeStruct((8,), jnp.int32),
          [pltpu.VMEM((8,), jnp.int32), pltpu.VMEM((8,), jnp.int32)],
          body, x)

  @parameterized.parameters(False, True)
  def test_scatter_race_only_on_shared_rows(self, same_rows):
    # Subcores 0 and 1 scatter to rows of one HBM output without a barrier:
    # a race only if they write the same rows.
    def body(o_hbm, idx_vmem, x_vmem):
      subcore = jax.lax.axis_index('subcore')
      base = jnp.where(same_rows, 0, 8 * subcore)
      idx_vmem[...] = base + jax.lax.iota(jnp.int32, 8)
      x_vmem[...] = jnp.full((8,), 1, jnp.int32)

      @pl.when(subcore < 2)
      def _():
        pltpu.sync_copy(x_vmem, o_hbm.at[idx_vmem])

    out = self._run_gather_kernel(
        jax.ShapeDtypeStruct((16,), jnp.int32),
        [pltpu.VMEM((8,), jnp.int32), pltpu.VMEM((8,), jnp.int32)],
        body, detect_races=True)
    np.testing.assert_array_equal(out[:8], np.ones(8))
    self.assertEqual(mosaic_interpret.races.races_found, same_rows)


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
