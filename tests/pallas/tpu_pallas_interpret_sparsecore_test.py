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

"""Tests for SparseCore kernels in TPU interpret mode.

Every (SparseCore, subcore) point of a `plsc.VectorSubcoreMesh` runs, with
`VMEM` private per subcore and `VMEM_SHARED` shared by the subcores of one
SparseCore. The tests build their meshes for a TPU v6e (2 SparseCores of 16
subcores, 8 lanes), described by an abstract mesh, on CPU.

To work around https://github.com/jax-ml/jax/issues/25671 , this file
contains only tests that do not use shard_map over several devices.
"""

# Older jax releases: begin.
import inspect

# Older jax releases: end.
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

_NUM_CORES = 2
_NUM_SUBCORES = 16
_NUM_LANES = 8


def _interpret(**kwargs):
  return test_util.interpret_params(
      allow_collective_axes_in_run_scoped=True, **kwargs
  )


def _tpu_v6e():
  """Returns an abstract TPU v6e chip: 2 SparseCores of 16 subcores."""
  # Older jax releases: begin.
  # At jax HEAD: return jax.sharding.AbstractDevice('TPU v6e', 1, 'tpu')
  # jax 0.10.0's `AbstractDevice` has no `platform`.
  parameters = inspect.signature(jax.sharding.AbstractDevice).parameters
  if 'platform' not in parameters:
    return jax.sharding.AbstractDevice('TPU v6e', 1)
  return jax.sharding.AbstractDevice('TPU v6e', 1, 'tpu')
  # Older jax releases: end.


def _vector_mesh(num_cores=_NUM_CORES):
  return plsc.VectorSubcoreMesh(
      core_axis_name='core', subcore_axis_name='subcore', num_cores=num_cores
  )


# TODO(jburnim): Figure out how to safely run different instance of TPU
# interpret mode in parallel, and then remove this decorator.
@jtu.thread_unsafe_test_class()
class InterpretSparseCoreTest(jtu.JaxTestCase):

  def setUp(self):
    super().setUp()

    if not jtu.test_device_matches(['cpu']):
      self.skipTest('CPU-only test')

    if jax.device_count() > 1:
      # Workaround for https://github.com/jax-ml/jax/issues/25671
      self.skipTest(f'requires 1 device, found {jax.device_count()}')

    # Older jax releases: begin.
    if jax.__version_info__ < (0, 10, 0):
      self.skipTest(
          'jax 0.9 and older: plsc.VectorSubcoreMesh is not a Pallas Mesh (it'
          ' has its own core_map rule), and their series have no SparseCore'
          ' patch (0006)'
      )
    # Older jax releases: end.

    # SparseCore meshes need the description of a TPU chip with SparseCores.
    self.enter_context(
        jax.sharding.use_abstract_mesh(
            jax.sharding.AbstractMesh((), (), abstract_device=_tpu_v6e())
        )
    )
    info = plsc.get_sparse_core_info()
    self.assertEqual(
        (info.num_cores, info.num_subcores, info.num_lanes),
        (_NUM_CORES, _NUM_SUBCORES, _NUM_LANES),
    )
    self.enter_context(test_util.fail_instead_of_hanging())

  @parameterized.parameters(1, 2)
  def test_every_subcore_writes_its_slice(self, num_cores):
    @test_util.kernel(
        out_type=jax.ShapeDtypeStruct(
            (num_cores, _NUM_SUBCORES, _NUM_LANES), jnp.int32
        ),
        mesh=_vector_mesh(num_cores),
        scratch_types=[pltpu.VMEM((_NUM_LANES,), jnp.int32)],
        interpret=_interpret(),
    )
    def kernel(o_ref, vmem_ref):
      core = jax.lax.axis_index('core')
      subcore = jax.lax.axis_index('subcore')
      vmem_ref[...] = jnp.full((_NUM_LANES,), 100 * core + subcore, jnp.int32)
      pltpu.sync_copy(vmem_ref, o_ref.at[core, subcore])

    expected = (
        100 * np.arange(num_cores)[:, None] + np.arange(_NUM_SUBCORES)[None, :]
    )
    np.testing.assert_array_equal(
        kernel(), np.broadcast_to(expected[..., None], expected.shape + (8,))
    )

  def test_every_scalar_subcore_runs(self):
    @test_util.kernel(
        out_type=jax.ShapeDtypeStruct((_NUM_CORES,), jnp.int32),
        mesh=plsc.ScalarSubcoreMesh(axis_name='core', num_cores=_NUM_CORES),
        scratch_types=[pltpu.SMEM((1,), jnp.int32)],
        interpret=_interpret(),
    )
    def kernel(o_ref, smem_ref):
      core = jax.lax.axis_index('core')
      smem_ref[0] = 10 * core + 7
      pltpu.sync_copy(smem_ref, o_ref.at[pl.ds(core, 1)])

    np.testing.assert_array_equal(kernel(), 10 * np.arange(_NUM_CORES) + 7)

  @parameterized.parameters(False, True)
  def test_shared_table_barrier_gather(self, detect_races):
    # The standard SparseCore pattern: one subcore copies a table into
    # VMEM_SHARED, all subcores wait at the barrier, then each gathers rows.
    num_rows = 24
    table = np.arange(num_rows * _NUM_LANES, dtype=np.float32).reshape(
        num_rows, _NUM_LANES
    )
    rows = (7 * np.arange(_NUM_SUBCORES)[None, :] + np.arange(_NUM_CORES)[
        :, None
    ]) % num_rows

    @test_util.kernel(
        out_type=jax.ShapeDtypeStruct(
            (_NUM_CORES, _NUM_SUBCORES, _NUM_LANES), jnp.float32
        ),
        mesh=_vector_mesh(),
        scratch_types=[
            pltpu.VMEM_SHARED((num_rows, _NUM_LANES), jnp.float32),
            pltpu.VMEM((_NUM_LANES,), jnp.float32),
        ],
        interpret=_interpret(detect_races=detect_races),
    )
    def kernel(table_ref, o_ref, shared_ref, row_ref):
      core = jax.lax.axis_index('core')
      subcore = jax.lax.axis_index('subcore')

      @pl.when(subcore == 0)
      def _():
        pltpu.sync_copy(table_ref, shared_ref)

      plsc.subcore_barrier()
      row = (7 * subcore + core) % num_rows
      pltpu.sync_copy(shared_ref.at[row], row_ref)
      pltpu.sync_copy(row_ref, o_ref.at[core, subcore])

    out = kernel(jnp.asarray(table))
    np.testing.assert_array_equal(out, table[rows])
    if detect_races:
      self.assertFalse(mosaic_interpret.races.races_found)

  def test_sparse_cores_do_not_share_vmem_shared(self):
    # Subcore 0 of each SparseCore writes its own value into VMEM_SHARED;
    # after the barrier, every subcore reads its own SparseCore's value.
    @test_util.kernel(
        out_type=jax.ShapeDtypeStruct(
            (_NUM_CORES, _NUM_SUBCORES, _NUM_LANES), jnp.int32
        ),
        mesh=_vector_mesh(),
        scratch_types=[
            pltpu.VMEM_SHARED((_NUM_LANES,), jnp.int32),
            pltpu.VMEM((_NUM_LANES,), jnp.int32),
        ],
        interpret=_interpret(detect_races=True),
    )
    def kernel(o_ref, shared_ref, vmem_ref):
      core = jax.lax.axis_index('core')
      subcore = jax.lax.axis_index('subcore')

      @pl.when(subcore == 0)
      def _():
        vmem_ref[...] = jnp.full((_NUM_LANES,), core + 1, jnp.int32)
        pltpu.sync_copy(vmem_ref, shared_ref)

      plsc.subcore_barrier()
      pltpu.sync_copy(shared_ref, vmem_ref)
      pltpu.sync_copy(vmem_ref, o_ref.at[core, subcore])

    expected = np.broadcast_to(
        np.arange(1, _NUM_CORES + 1)[:, None, None],
        (_NUM_CORES, _NUM_SUBCORES, _NUM_LANES),
    )
    np.testing.assert_array_equal(kernel(), expected)
    self.assertFalse(mosaic_interpret.races.races_found)

  @parameterized.parameters(False, True)
  def test_race_on_vmem_shared_without_barrier(self, barrier):
    # Every subcore writes the same VMEM_SHARED words. Without a barrier
    # between subcore 0's write and the others', that is a race.
    @test_util.kernel(
        out_type=jax.ShapeDtypeStruct((_NUM_LANES,), jnp.int32),
        mesh=_vector_mesh(1),
        scratch_types=[
            pltpu.VMEM_SHARED((_NUM_LANES,), jnp.int32),
            pltpu.VMEM((_NUM_LANES,), jnp.int32),
        ],
        interpret=_interpret(detect_races=True),
    )
    def kernel(o_ref, shared_ref, vmem_ref):
      subcore = jax.lax.axis_index('subcore')
      vmem_ref[...] = jnp.full((_NUM_LANES,), 1, jnp.int32)

      @pl.when(subcore == 0)
      def _():
        pltpu.sync_copy(vmem_ref, shared_ref)

      if barrier:
        plsc.subcore_barrier()

      @pl.when(subcore == 1)
      def _():
        pltpu.sync_copy(vmem_ref, shared_ref)
        pltpu.sync_copy(shared_ref, o_ref)

    np.testing.assert_array_equal(kernel(), np.ones(_NUM_LANES))
    self.assertEqual(mosaic_interpret.races.races_found, not barrier)

  @parameterized.parameters(
      (('subcore',), np.arange(_NUM_CORES) * 10 + 1),
      (('core', 'subcore'), np.full(_NUM_CORES, 1)),
  )
  def test_collective_scope(self, collective_axes, expected_per_core):
    # Subcore 0 of each SparseCore (or of SparseCore 0, when the scope spans
    # both axes) fills the collective buffer and signals the collective
    # semaphore once per subcore sharing it; every subcore then reads it.
    sharing = _NUM_SUBCORES * (2 if 'core' in collective_axes else 1)

    @test_util.kernel(
        out_type=jax.ShapeDtypeStruct(
            (_NUM_CORES, _NUM_SUBCORES, _NUM_LANES), jnp.int32
        ),
        mesh=_vector_mesh(),
        scratch_types=[pltpu.VMEM((_NUM_LANES,), jnp.int32)],
        interpret=_interpret(detect_races=True),
    )
    def kernel(o_ref, vmem_ref):
      core = jax.lax.axis_index('core')
      subcore = jax.lax.axis_index('subcore')
      writer = subcore == 0
      if 'core' in collective_axes:
        writer &= core == 0

      def body(buffer_ref, sem):
        @pl.when(writer)
        def _():
          buffer_ref[...] = jnp.full((_NUM_LANES,), 10 * core + 1, jnp.int32)
          pl.semaphore_signal(sem, sharing)

        pl.semaphore_wait(sem, 1)
        vmem_ref[...] = buffer_ref[...]
        pltpu.sync_copy(vmem_ref, o_ref.at[core, subcore])

      pl.run_scoped(
          body,
          pltpu.VMEM((_NUM_LANES,), jnp.int32),
          pltpu.SemaphoreType.REGULAR,
          collective_axes=collective_axes,
      )

    expected = np.broadcast_to(
        expected_per_core[:, None, None],
        (_NUM_CORES, _NUM_SUBCORES, _NUM_LANES),
    )
    np.testing.assert_array_equal(kernel(), expected)
    self.assertFalse(mosaic_interpret.races.races_found)

  def test_masked_load_and_store(self):
    x = np.arange(_NUM_LANES, dtype=np.int32) + 1
    mask = np.arange(_NUM_LANES) < 5

    @test_util.kernel(
        out_type=jax.ShapeDtypeStruct((_NUM_LANES,), jnp.int32),
        mesh=_vector_mesh(1),
        scratch_types=[
            pltpu.VMEM((_NUM_LANES,), jnp.int32),
            pltpu.VMEM((_NUM_LANES,), jnp.int32),
        ],
        interpret=_interpret(),
    )
    def kernel(x_ref, o_ref, x_vmem, o_vmem):
      @pl.when(jax.lax.axis_index('subcore') == 0)
      def _():
        pltpu.sync_copy(x_ref, x_vmem)
        o_vmem[...] = jnp.full((_NUM_LANES,), -1, jnp.int32)
        lanes = jax.lax.broadcasted_iota(jnp.int32, (_NUM_LANES,), 0)
        m = lanes < 5
        # Where the mask is unset, the loaded value is undefined; the masked
        # store does not write it.
        pltpu.store(o_vmem, 2 * pltpu.load(x_vmem, mask=m), mask=m)
        pltpu.sync_copy(o_vmem, o_ref)

    np.testing.assert_array_equal(kernel(x), np.where(mask, 2 * x, -1))

  def test_masked_load_reads_only_unmasked_elements(self):
    # The last 3 lanes of the window are past the end of the buffer: a load
    # that masks them out is in bounds, one that does not is an error.
    def make(num_masked_out):
      @test_util.kernel(
          out_type=jax.ShapeDtypeStruct((_NUM_LANES,), jnp.int32),
          mesh=_vector_mesh(1),
          scratch_types=[
              pltpu.VMEM((_NUM_LANES + 5,), jnp.int32),
              pltpu.VMEM((_NUM_LANES,), jnp.int32),
          ],
          interpret=_interpret(),
      )
      def kernel(o_ref, x_vmem, o_vmem):
        @pl.when(jax.lax.axis_index('subcore') == 0)
        def _():
          x_vmem[...] = jnp.arange(_NUM_LANES + 5, dtype=jnp.int32)
          lanes = jax.lax.broadcasted_iota(jnp.int32, (_NUM_LANES,), 0)
          m = lanes < _NUM_LANES - num_masked_out
          o_vmem[...] = jnp.zeros((_NUM_LANES,), jnp.int32)
          # A traced start, which jax does not bounds-check at trace time.
          start = jax.lax.axis_index('subcore') + 8
          window = x_vmem.at[pl.ds(start, _NUM_LANES)]
          pltpu.store(o_vmem, pltpu.load(window, mask=m), mask=m)
          pltpu.sync_copy(o_vmem, o_ref)

      return kernel

    np.testing.assert_array_equal(make(3)(), [8, 9, 10, 11, 12, 0, 0, 0])
    with self.assertRaisesRegex(
        Exception, r'Out-of-bounds masked read'
    ):
      jax.block_until_ready(make(2)())
    test_util.reset_after_failure()

  @parameterized.parameters(False, True)
  def test_load_gather(self, masked):
    rng = np.random.default_rng(0)
    x = rng.integers(-100, 100, (2, 16)).astype(np.int32)
    indices = rng.integers(0, 16, (_NUM_LANES,)).astype(np.int32)
    mask = rng.integers(0, 2, (_NUM_LANES,)).astype(bool)

    @test_util.kernel(
        out_type=jax.ShapeDtypeStruct((_NUM_LANES,), jnp.int32),
        mesh=_vector_mesh(1),
        scratch_types=[
            pltpu.VMEM((2, 16), jnp.int32),
            pltpu.VMEM((_NUM_LANES,), jnp.int32),
            pltpu.VMEM((_NUM_LANES,), jnp.int32),
            pltpu.VMEM((_NUM_LANES,), jnp.int32),
        ],
        interpret=_interpret(detect_races=True),
    )
    def kernel(x_ref, i_ref, m_ref, o_ref, x_vmem, i_vmem, m_vmem, o_vmem):
      @pl.when(jax.lax.axis_index('subcore') == 0)
      def _():
        pltpu.sync_copy(x_ref, x_vmem)
        pltpu.sync_copy(i_ref, i_vmem)
        pltpu.sync_copy(m_ref, m_vmem)
        m = (m_vmem[...] != 0) if masked else None
        # Row 1 of `x`, through a transformed ref.
        gathered = plsc.load_gather(x_vmem.at[1], [i_vmem[...]], mask=m)
        o_vmem[...] = jnp.where(m, gathered, -1) if masked else gathered
        pltpu.sync_copy(o_vmem, o_ref)

    out = kernel(x, indices, mask.astype(np.int32))
    expected = np.take(x[1], indices)
    if masked:
      expected = np.where(mask, expected, -1)
    np.testing.assert_array_equal(out, expected)
    self.assertFalse(mosaic_interpret.races.races_found)

  @parameterized.parameters(False, True)
  def test_store_scatter(self, masked):
    rng = np.random.default_rng(1)
    x = rng.integers(-100, 100, (_NUM_LANES,)).astype(np.int32)
    # Distinct indices, so the result does not depend on the order of writes.
    indices = rng.permutation(16)[:_NUM_LANES].astype(np.int32)
    mask = rng.integers(0, 2, (_NUM_LANES,)).astype(bool)

    @test_util.kernel(
        out_type=jax.ShapeDtypeStruct((16,), jnp.int32),
        mesh=_vector_mesh(1),
        scratch_types=[
            pltpu.VMEM((_NUM_LANES,), jnp.int32),
            pltpu.VMEM((_NUM_LANES,), jnp.int32),
            pltpu.VMEM((_NUM_LANES,), jnp.int32),
            pltpu.VMEM((16,), jnp.int32),
        ],
        interpret=_interpret(),
    )
    def kernel(x_ref, i_ref, m_ref, o_ref, x_vmem, i_vmem, m_vmem, o_vmem):
      @pl.when(jax.lax.axis_index('subcore') == 0)
      def _():
        pltpu.sync_copy(x_ref, x_vmem)
        pltpu.sync_copy(i_ref, i_vmem)
        pltpu.sync_copy(m_ref, m_vmem)
        o_vmem[...] = jnp.zeros((16,), jnp.int32)
        m = (m_vmem[...] != 0) if masked else None
        plsc.store_scatter(o_vmem, [i_vmem[...]], x_vmem[...], mask=m)
        pltpu.sync_copy(o_vmem, o_ref)

    out = kernel(x, indices, mask.astype(np.int32))
    expected = np.zeros(16, np.int32)
    if masked:
      np.put(expected, indices[mask], x[mask])
    else:
      np.put(expected, indices, x)
    np.testing.assert_array_equal(out, expected)

  def test_addupdate_scatter_adds_repeated_indices(self):
    x = np.arange(1, _NUM_LANES + 1, dtype=np.int32)
    indices = np.array([3, 0, 3, 5, 0, 3, 7, 1], np.int32)

    @test_util.kernel(
        out_type=jax.ShapeDtypeStruct((_NUM_LANES,), jnp.int32),
        mesh=_vector_mesh(1),
        scratch_types=[
            pltpu.VMEM((_NUM_LANES,), jnp.int32),
            pltpu.VMEM((_NUM_LANES,), jnp.int32),
            pltpu.VMEM((_NUM_LANES,), jnp.int32),
        ],
        interpret=_interpret(),
    )
    def kernel(x_ref, i_ref, o_ref, x_vmem, i_vmem, o_vmem):
      @pl.when(jax.lax.axis_index('subcore') == 0)
      def _():
        pltpu.sync_copy(x_ref, x_vmem)
        pltpu.sync_copy(i_ref, i_vmem)
        o_vmem[...] = jnp.full((_NUM_LANES,), 100, jnp.int32)
        plsc.addupdate_scatter(o_vmem, [i_vmem[...]], x_vmem[...])
        pltpu.sync_copy(o_vmem, o_ref)

    expected = np.full(_NUM_LANES, 100, np.int32)
    np.add.at(expected, indices, x)
    np.testing.assert_array_equal(kernel(x, indices), expected)

  def test_out_of_bounds_gather_raises(self):
    @test_util.kernel(
        out_type=jax.ShapeDtypeStruct((_NUM_LANES,), jnp.int32),
        mesh=_vector_mesh(1),
        scratch_types=[pltpu.VMEM((_NUM_LANES,), jnp.int32)],
        interpret=_interpret(),
    )
    def kernel(o_ref, vmem_ref):
      @pl.when(jax.lax.axis_index('subcore') == 0)
      def _():
        vmem_ref[...] = jnp.zeros((_NUM_LANES,), jnp.int32)
        lanes = jax.lax.broadcasted_iota(jnp.int32, (_NUM_LANES,), 0)
        vmem_ref[...] = plsc.load_gather(vmem_ref, [lanes + 1])
        pltpu.sync_copy(vmem_ref, o_ref)

    with self.assertRaisesRegex(
        Exception, r'Out-of-bounds gather .* element 7 reads \(8,\)'
    ):
      jax.block_until_ready(kernel())
    test_util.reset_after_failure()

  def test_parallel_loop(self):
    x = np.arange(4 * _NUM_LANES, dtype=np.int32)

    @test_util.kernel(
        out_type=(
            jax.ShapeDtypeStruct(x.shape, jnp.int32),
            jax.ShapeDtypeStruct((_NUM_LANES,), jnp.int32),
        ),
        mesh=_vector_mesh(1),
        scratch_types=[
            pltpu.VMEM(x.shape, jnp.int32),
            pltpu.VMEM((_NUM_LANES,), jnp.int32),
        ],
        interpret=_interpret(),
    )
    def kernel(x_ref, o_ref, sum_ref, vmem_ref, sum_vmem):
      @pl.when(jax.lax.axis_index('subcore') == 0)
      def _():
        pltpu.sync_copy(x_ref, vmem_ref)

        @plsc.parallel_loop(0, x.shape[0], _NUM_LANES)
        def _(i):
          vmem_ref[pl.ds(i, _NUM_LANES)] += 1

        @plsc.parallel_loop(
            0, x.shape[0], _NUM_LANES, carry=jnp.zeros(_NUM_LANES, jnp.int32)
        )
        def total(i, acc):
          return acc + vmem_ref[pl.ds(i, _NUM_LANES)]

        sum_vmem[...] = total
        pltpu.sync_copy(vmem_ref, o_ref)
        pltpu.sync_copy(sum_vmem, sum_ref)

    out, total = kernel(x)
    np.testing.assert_array_equal(out, x + 1)
    np.testing.assert_array_equal(
        total, (x + 1).reshape(-1, _NUM_LANES).sum(axis=0)
    )

  def test_barrier_not_reached_by_every_subcore_is_a_deadlock(self):
    @test_util.kernel(
        out_type=jax.ShapeDtypeStruct((_NUM_LANES,), jnp.int32),
        mesh=_vector_mesh(1),
        scratch_types=[pltpu.VMEM((_NUM_LANES,), jnp.int32)],
        interpret=_interpret(),
    )
    def kernel(o_ref, vmem_ref):
      subcore = jax.lax.axis_index('subcore')

      @pl.when(subcore != 3)
      def _():
        plsc.subcore_barrier()

      @pl.when(subcore == 0)
      def _():
        vmem_ref[...] = jnp.zeros((_NUM_LANES,), jnp.int32)
        pltpu.sync_copy(vmem_ref, o_ref)

    with self.assertRaisesRegex(
        jax.errors.JaxRuntimeError,
        r'(?s)DeadlockError.*device 0, core 0: waits .* for subcore barrier'
        r'.* to reach 16; its count is 15\.',
    ):
      jax.block_until_ready(kernel())
    test_util.reset_after_failure()

  def _collective_kernel(self, collective_axes, **params):
    @test_util.kernel(
        out_type=jax.ShapeDtypeStruct((_NUM_LANES,), jnp.int32),
        mesh=_vector_mesh(),
        interpret=test_util.interpret_params(**params),
    )
    def kernel(o_ref):
      def body(buffer_ref):
        buffer_ref[...] = jnp.zeros((_NUM_LANES,), jnp.int32)
        pltpu.sync_copy(buffer_ref, o_ref)

      pl.run_scoped(
          body,
          pltpu.VMEM((_NUM_LANES,), jnp.int32),
          collective_axes=collective_axes,
      )

    return kernel

  def test_collective_scope_needs_allow_flag(self):
    with self.assertRaisesRegex(
        NotImplementedError,
        r'not supported by the Mosaic TPU compiler.*'
        r'InterpretParams\(allow_collective_axes_in_run_scoped=True\)',
    ):
      self._collective_kernel('subcore')()

  def test_axis_not_in_scope_raises(self):
    with self.assertRaisesRegex(
        ValueError,
        r"'rows' is not a core axis .* The available core axes are"
        r" \('core', 'subcore'\)",
    ):
      self._collective_kernel(
          'rows', allow_collective_axes_in_run_scoped=True
      )()

  def test_core_axis_alone_raises(self):
    with self.assertRaisesRegex(
        NotImplementedError,
        r'only supports collective allocation over all core axes, or over'
        r' the subcore axis',
    ):
      self._collective_kernel(
          'core', allow_collective_axes_in_run_scoped=True
      )()

  def test_device_axis_raises(self):
    kernel = self._collective_kernel(
        ('x', 'subcore'), allow_collective_axes_in_run_scoped=True
    )
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ('x',))
    f = jax.shard_map(
        kernel,
        mesh=mesh,
        in_specs=(),
        out_specs=jax.sharding.PartitionSpec('x'),
        check_vma=False,
    )
    with self.assertRaisesRegex(
        NotImplementedError, r"'x' is a device axis"
    ):
      f()


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
