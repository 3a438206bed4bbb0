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

`InterpretSparseCoreTest` holds the tests of the series' patch 0007 (meshes,
`VMEM_SHARED`, `subcore_barrier`, collective scopes),
`InterpretSparseCoreLoadStoreTest` those of 0008 (masked loads, gathers,
scatters, `parallel_loop`).

To work around https://github.com/jax-ml/jax/issues/25671 , this file
contains only tests that do not use shard_map over several devices.
"""

import sys
from unittest import mock

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


class _SparseCoreTestCase(test_util.InterpretTestCase):
  """Skips the SparseCore tests on releases without SparseCore meshes."""

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 10, 0):
      self.skipTest(
          'jax 0.9 and older: plsc.VectorSubcoreMesh is not a Pallas Mesh (it'
          ' has its own core_map rule), and their series have no SparseCore'
          ' patches (0007, 0008)'
      )
    # Older jax releases: end.


# TODO(jburnim): Figure out how to safely run different instance of TPU
# interpret mode in parallel, and then remove this decorator.
@jtu.thread_unsafe_test_class()
class InterpretSparseCoreTest(_SparseCoreTestCase):

  def _sparse_core_kernel(self, out_type=None, *scratch_types, num_cores=2,
                          num_subcores=16, scalar=False, **params):
    """Returns `pl.kernel` over the subcores of a TPU v6e, in interpret mode.

    By default over a `plsc.VectorSubcoreMesh` of 2 SparseCores of 16
    subcores, each with an int32 output row of 8 lanes.
    """
    abstract_device = test_util.tpu_v6e()
    self.enter_context(jax.sharding.use_abstract_mesh(
        jax.sharding.AbstractMesh((), (), abstract_device=abstract_device)))
    if scalar:
      mesh = plsc.ScalarSubcoreMesh(axis_name='core', num_cores=num_cores)
    else:
      mesh = plsc.VectorSubcoreMesh(
          core_axis_name='core', subcore_axis_name='subcore',
          num_cores=num_cores, num_subcores=num_subcores)
    return test_util.kernel(
        out_type=out_type
        or jax.ShapeDtypeStruct((num_cores, num_subcores, 8), jnp.int32),
        mesh=mesh,
        scratch_types=scratch_types,
        interpret=test_util.interpret_params(on_race='warn', **params),
    )

  @parameterized.parameters(1, 2)
  def test_every_subcore_writes_its_slice(self, num_cores):
    @self._sparse_core_kernel(None, pltpu.VMEM((8,), jnp.int32),
                              num_cores=num_cores)
    def kernel(o_ref, vmem_ref):
      core = jax.lax.axis_index('core')
      subcore = jax.lax.axis_index('subcore')
      vmem_ref[...] = jnp.full((8,), 100 * core + subcore, jnp.int32)
      pltpu.sync_copy(vmem_ref, o_ref.at[core, subcore])

    expected = 100 * np.arange(num_cores)[:, None] + np.arange(16)[None, :]
    np.testing.assert_array_equal(
        kernel(), np.broadcast_to(expected[..., None], expected.shape + (8,))
    )

  def test_every_scalar_subcore_runs(self):
    @self._sparse_core_kernel(jax.ShapeDtypeStruct((2,), jnp.int32),
                              pltpu.SMEM((1,), jnp.int32), scalar=True)
    def kernel(o_ref, smem_ref):
      core = jax.lax.axis_index('core')
      smem_ref[0] = 10 * core + 7
      pltpu.sync_copy(smem_ref, o_ref.at[pl.ds(core, 1)])

    np.testing.assert_array_equal(kernel(), 10 * np.arange(2) + 7)

  @parameterized.parameters(False, True)
  def test_shared_table_barrier_gather(self, detect_races):
    # One subcore copies its SparseCore's table into its VMEM_SHARED, all
    # subcores wait at the barrier, then each gathers rows.
    table = np.arange(2 * 24 * 8, dtype=np.float32).reshape(2, 24, 8)
    rows = (7 * np.arange(16)[None, :] + np.arange(2)[:, None]) % 24

    @self._sparse_core_kernel(
        jax.ShapeDtypeStruct((2, 16, 8), jnp.float32),
        pltpu.VMEM_SHARED((24, 8), jnp.float32),
        pltpu.VMEM((8,), jnp.float32),
        detect_races=detect_races,
    )
    def kernel(table_ref, o_ref, shared_ref, row_ref):
      core = jax.lax.axis_index('core')
      subcore = jax.lax.axis_index('subcore')

      @pl.when(subcore == 0)
      def _():
        pltpu.sync_copy(table_ref.at[core], shared_ref)

      plsc.subcore_barrier()
      pltpu.sync_copy(shared_ref.at[(7 * subcore + core) % 24], row_ref)
      pltpu.sync_copy(row_ref, o_ref.at[core, subcore])

    np.testing.assert_array_equal(
        kernel(jnp.asarray(table)), table[np.arange(2)[:, None], rows]
    )
    if detect_races:
      self.assertFalse(mosaic_interpret.races.races_found)

  @parameterized.parameters(False, True)
  def test_race_on_vmem_shared_without_barrier(self, barrier):
    # Subcores 0 and 1 write the same VMEM_SHARED words. Without a barrier
    # between subcore 0's write and subcore 1's, that is a race.
    @self._sparse_core_kernel(jax.ShapeDtypeStruct((8,), jnp.int32),
                              pltpu.VMEM_SHARED((8,), jnp.int32),
                              pltpu.VMEM((8,), jnp.int32), num_cores=1,
                              detect_races=True)
    def kernel(o_ref, shared_ref, vmem_ref):
      subcore = jax.lax.axis_index('subcore')
      vmem_ref[...] = jnp.full((8,), 1, jnp.int32)

      @pl.when(subcore == 0)
      def _():
        pltpu.sync_copy(vmem_ref, shared_ref)

      if barrier:
        plsc.subcore_barrier()

      @pl.when(subcore == 1)
      def _():
        pltpu.sync_copy(vmem_ref, shared_ref)
        pltpu.sync_copy(shared_ref, o_ref)

    np.testing.assert_array_equal(kernel(), np.ones(8))
    self.assertEqual(mosaic_interpret.races.races_found, not barrier)

  @parameterized.parameters(
      (('subcore',), pltpu.VMEM, np.arange(2) * 10 + 1),
      (('subcore',), pltpu.HBM, np.arange(2) * 10 + 1),  # One per SparseCore.
      (('core', 'subcore'), pltpu.VMEM, np.full(2, 1)),
  )
  def test_collective_scope_over_subcore_axes(
      self, collective_axes, memory_space, expected_per_core
  ):
    # Subcore 0 of each group sharing the buffer fills it and signals the
    # shared semaphore once per sharer; every subcore then reads it. Not on 2 x
    # 16 subcores: XLA's CPU client runs at most 32 computations at once.
    sharing = 8 * (2 if 'core' in collective_axes else 1)

    @self._sparse_core_kernel(
        None, pltpu.VMEM((8,), jnp.int32), num_subcores=8,
        detect_races=True,
        allow_collective_axes_in_run_scoped=True,
        allow_hbm_allocation_in_run_scoped=memory_space is pltpu.HBM,
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
          vmem_ref[...] = jnp.full((8,), 10 * core + 1, jnp.int32)
          pltpu.sync_copy(vmem_ref, buffer_ref)
          pl.semaphore_signal(sem, sharing)

        pl.semaphore_wait(sem, 1)
        pltpu.sync_copy(buffer_ref, vmem_ref)
        pltpu.sync_copy(vmem_ref, o_ref.at[core, subcore])

      pl.run_scoped(
          body,
          memory_space((8,), jnp.int32),
          pltpu.SemaphoreType.REGULAR,
          collective_axes=collective_axes,
      )

    expected = np.broadcast_to(expected_per_core[:, None, None], (2, 8, 8))
    np.testing.assert_array_equal(kernel(), expected)
    self.assertFalse(mosaic_interpret.races.races_found)

  def test_collective_scope_in_a_loop_leaves_no_records(self):
    # When the kernel ends, the interpreter keeps no record of the subcores'
    # collective allocations (it kept one per SparseCore and iteration).
    left = []
    clear = mosaic_interpret._clear_shared_memory

    def record_and_clear():
      memory = mosaic_interpret._get_shared_memory()
      left.append((len(memory.collective_allocations),
                   len(memory.collective_buffer_group_sizes)))
      clear()

    self.enter_context(mock.patch.object(
        mosaic_interpret, '_clear_shared_memory', record_and_clear))

    @self._sparse_core_kernel(None, pltpu.VMEM((8,), jnp.int32),
                              num_subcores=4,
                              allow_collective_axes_in_run_scoped=True)
    def kernel(o_ref, vmem_ref):
      vmem_ref[...] = jnp.full((8,), 7, jnp.int32)
      for _ in range(10):
        pl.run_scoped(lambda _: None, pltpu.VMEM((8,), jnp.int32),
                      collective_axes=('subcore',))
      pltpu.sync_copy(vmem_ref, o_ref.at[jax.lax.axis_index('core'),
                                         jax.lax.axis_index('subcore')])

    np.testing.assert_array_equal(kernel(), np.full((2, 4, 8), 7))
    self.assertEqual(left, [(0, 0)])

  def test_barrier_not_reached_by_every_subcore_is_a_deadlock(self):
    @self._sparse_core_kernel(jax.ShapeDtypeStruct((8,), jnp.int32),
                              pltpu.VMEM((8,), jnp.int32), num_cores=1)
    def kernel(o_ref, vmem_ref):
      subcore = jax.lax.axis_index('subcore')

      @pl.when(subcore != 3)
      def _():
        plsc.subcore_barrier()

      @pl.when(subcore == 0)
      def _():
        vmem_ref[...] = jnp.zeros((8,), jnp.int32)
        pltpu.sync_copy(vmem_ref, o_ref)

    with self.assertRaisesRegex(
        jax.errors.JaxRuntimeError,
        r'(?s)DeadlockError.*device 0, core 0: waits .* for'
        r' subcore barrier.* to reach 16; its count is 15\.',
    ):
      jax.block_until_ready(kernel())
    test_util.reset_after_failure()

  @parameterized.named_parameters(
      ('signal_core_index', True, False, False),
      ('signal_device_id_core_and_subcore', True, True, False),
      ('signal_device_id_subcore', False, True, False),
      ('dma_device_id_core_and_subcore', True, True, True),
  )
  def test_sparse_core_signal_and_dma_reach_sparse_core_and_subcore(
      self, other_core, other_subcore, dma
  ):
    # Subcore (c, s) sends 100 * c + s + 1 to its peer.
    # Older jax releases: begin.
    if not other_subcore and jax.__version_info__ < (0, 10, 2):
      self.skipTest(
          "jax 0.10.0 and 0.10.1 lower core_index as Mosaic's flat core ID"
          ' (num_subcores * core + subcore), and so do their series'
      )
    # Older jax releases: end.

    def peer(core, subcore):
      return (1 - core if other_core else core,
              15 - subcore if other_subcore else subcore)

    @self._sparse_core_kernel(
        None,
        pltpu.VMEM((8,), jnp.int32),
        pltpu.VMEM((8,), jnp.int32),
        pltpu.SemaphoreType.REGULAR,
        pltpu.SemaphoreType.DMA,
        pltpu.SemaphoreType.DMA,
    )
    def kernel(o_ref, src_ref, dst_ref, sem, send_sem, recv_sem):
      core = jax.lax.axis_index('core')
      subcore = jax.lax.axis_index('subcore')
      peer_core, peer_subcore = peer(core, subcore)
      value = 100 * core + subcore + 1
      device_id = {'subcore': peer_subcore}
      if other_core:
        device_id['core'] = peer_core
      if dma:
        src_ref[...] = jnp.full((8,), value, jnp.int32)
        copy = pltpu.make_async_remote_copy(
            src_ref, dst_ref, send_sem, recv_sem, device_id=device_id
        )
        copy.start()
        copy.wait()
      else:
        if other_subcore:
          pl.semaphore_signal(sem, value, device_id=device_id)
        else:
          pl.semaphore_signal(sem, value, core_index=peer_core)
        peer_value = 100 * peer_core + peer_subcore + 1
        pl.semaphore_wait(sem, peer_value)
        dst_ref[...] = jnp.full((8,), peer_value, jnp.int32)
      pltpu.sync_copy(dst_ref, o_ref.at[core, subcore])

    # Older jax releases: begin.
    # A device_id dict naming the core or subcore axis raises where Mosaic's
    # lowering drops those axes in a SparseCore kernel (the short circuit in
    # `_device_id_to_logical`): in a DMA from jax 0.10.0, in a signal from
    # 0.10.1, until 0.12 routes them.
    first = (0, 10, 0) if dma else (0, 10, 1)
    if other_subcore and first <= jax.__version_info__ < (0, 12, 0):
      op = 'dma_start' if dma else 'semaphore_signal'
      with self.assertRaisesRegex(NotImplementedError, op + ' with a device'):
        kernel()
      return
    # Older jax releases: end.
    peer_core, peer_subcore = peer(np.arange(2)[:, None], np.arange(16))
    expected = 100 * peer_core + peer_subcore + 1
    np.testing.assert_array_equal(
        kernel(), np.broadcast_to(expected[..., None], (2, 16, 8))
    )

  @parameterized.named_parameters(
      ('needs_allow_flag', 'subcore', False, NotImplementedError,
       r'InterpretParams\(allow_collective_axes_in_run_scoped=True\)'),
      ('axis_not_in_scope', 'rows', True, ValueError,
       r"'rows' is not a core axis .* are \('core', 'subcore'\)"),
      ('core_axis_alone', 'core', True, NotImplementedError,
       r'over all core axes, or over the subcore axis'),
      ('device_axis', ('x', 'subcore'), True, NotImplementedError,
       r"'x' is a device axis"),
  )
  def test_sparse_core_collective_axes_raise(
      self, collective_axes, allow, error, regex
  ):
    @self._sparse_core_kernel(
        jax.ShapeDtypeStruct((8,), jnp.int32),
        allow_collective_axes_in_run_scoped=allow,
    )
    def kernel(o_ref):
      def body(buffer_ref):
        buffer_ref[...] = jnp.zeros((8,), jnp.int32)
        pltpu.sync_copy(buffer_ref, o_ref)

      pl.run_scoped(
          body, pltpu.VMEM((8,), jnp.int32), collective_axes=collective_axes
      )

    # In a one-device shard_map, whose axis 'x' is a device axis.
    f = jax.shard_map(
        kernel,
        mesh=jax.sharding.Mesh(np.array(jax.devices()[:1]), ('x',)),
        in_specs=(),
        out_specs=jax.sharding.PartitionSpec('x'),
        check_vma=False,
    )
    with self.assertRaisesRegex(error, regex):
      f()

@jtu.thread_unsafe_test_class()
class InterpretSparseCoreLoadStoreTest(_SparseCoreTestCase):

  # The kernel of InterpretSparseCoreTest's tests.
  _sparse_core_kernel = InterpretSparseCoreTest._sparse_core_kernel

  def _run_on_subcore_0(self, body, out_type, *operands, **params):
    """Runs `body` on subcore 0 of a SparseCore and returns the outputs.

    Args:
      body: Called with a VMEM copy of each operand, then a VMEM buffer per
        output, which it fills.
      out_type: A `jax.ShapeDtypeStruct`, or a tuple of them.
      *operands: numpy arrays.
      **params: `InterpretParams` fields.
    """
    out_types = out_type if isinstance(out_type, tuple) else (out_type,)
    n = len(operands)

    @self._sparse_core_kernel(
        out_type,
        *(pltpu.VMEM(x.shape, x.dtype) for x in (*operands, *out_types)),
        num_cores=1,
        **params,
    )
    def kernel(*refs):
      vmem = refs[n + len(out_types):]

      @pl.when(jax.lax.axis_index('subcore') == 0)
      def _():
        for src, dst in zip(refs[:n], vmem):
          pltpu.sync_copy(src, dst)
        body(*vmem)
        for src, dst in zip(vmem[n:], refs[n:]):
          pltpu.sync_copy(src, dst)

    return jax.block_until_ready(kernel(*operands))

  def test_masked_load_and_store(self):
    x = np.arange(8, dtype=np.int32) + 1

    def body(x_vmem, o_vmem):
      o_vmem[...] = jnp.full((8,), -1, jnp.int32)
      m = jax.lax.broadcasted_iota(jnp.int32, (8,), 0) < 5
      # Where the mask is unset, the loaded value is undefined; the masked
      # store does not write it.
      pltpu.store(o_vmem, 2 * pltpu.load(x_vmem, mask=m), mask=m)

    out = self._run_on_subcore_0(body, jax.ShapeDtypeStruct((8,), jnp.int32), x)
    np.testing.assert_array_equal(out, np.where(np.arange(8) < 5, 2 * x, -1))

  @parameterized.parameters(3, 2)
  def test_masked_load_reads_only_unmasked_elements(self, num_masked_out):
    # The window starts at 8 of a buffer of 13, so its last 3 lanes are past
    # the end: a load that masks them out is in bounds, one that does not is
    # an error.
    def body(x_vmem, o_vmem):
      m = jax.lax.broadcasted_iota(jnp.int32, (8,), 0) < 8 - num_masked_out
      o_vmem[...] = jnp.zeros((8,), jnp.int32)
      # A traced start, which jax does not bounds-check at trace time.
      start = jax.lax.axis_index('subcore') + 8
      window = x_vmem.at[pl.ds(start, 8)]
      pltpu.store(o_vmem, pltpu.load(window, mask=m), mask=m)

    run = lambda: self._run_on_subcore_0(
        body, jax.ShapeDtypeStruct((8,), jnp.int32),
        np.arange(13, dtype=np.int32),
    )
    if num_masked_out == 3:
      np.testing.assert_array_equal(run(), [8, 9, 10, 11, 12, 0, 0, 0])
    else:
      with self.assertRaisesRegex(
          jax.errors.JaxRuntimeError, r'Out-of-bounds masked read'
      ):
        run()
      test_util.reset_after_failure()

  @parameterized.parameters(4, 5)
  def test_masked_load_race_check_covers_only_unmasked_elements(
      self, num_read
  ):
    # A DMA writes elements 8 to 15 of a buffer while a masked load of the
    # window 4 to 11 reads its first `num_read` elements: only with 5 does the
    # load read an element the DMA writes, which is a race.
    @self._sparse_core_kernel(
        jax.ShapeDtypeStruct((8,), jnp.int32),
        pltpu.VMEM((16,), jnp.int32),
        pltpu.VMEM((8,), jnp.int32),
        pltpu.SemaphoreType.DMA,
        num_cores=1,
        detect_races=True,
    )
    def kernel(x_ref, o_ref, buffer_ref, out_vmem_ref, sem):
      @pl.when(jax.lax.axis_index('subcore') == 0)
      def _():
        buffer_ref[pl.ds(0, 8)] = jnp.arange(8, dtype=jnp.int32)
        copy = pltpu.make_async_copy(x_ref, buffer_ref.at[pl.ds(8, 8)], sem)
        copy.start()
        m = jax.lax.broadcasted_iota(jnp.int32, (8,), 0) < num_read
        loaded = pltpu.load(buffer_ref.at[pl.ds(4, 8)], mask=m)
        copy.wait()
        out_vmem_ref[...] = jnp.where(m, loaded, -1)
        pltpu.sync_copy(out_vmem_ref, o_ref)

    out = jax.block_until_ready(kernel(jnp.arange(8, 16, dtype=jnp.int32)))
    self.assertEqual(mosaic_interpret.races.races_found, num_read == 5)
    np.testing.assert_array_equal(out[:4], [4, 5, 6, 7])
    np.testing.assert_array_equal(out[num_read:], -1)

  @parameterized.parameters(False, True)
  def test_load_gather(self, masked):
    rng = np.random.default_rng(0)
    x = rng.integers(-100, 100, (2, 16)).astype(np.int32)
    indices = rng.integers(0, 16, (8,)).astype(np.int32)
    mask = rng.integers(0, 2, (8,)).astype(np.int32)

    def body(x_vmem, i_vmem, m_vmem, o_vmem):
      m = (m_vmem[...] != 0) if masked else None
      # Row 1 of `x`, through a transformed ref.
      gathered = plsc.load_gather(x_vmem.at[1], [i_vmem[...]], mask=m)
      o_vmem[...] = jnp.where(m, gathered, -1) if masked else gathered

    out = self._run_on_subcore_0(
        body, jax.ShapeDtypeStruct((8,), jnp.int32), x, indices, mask,
        detect_races=True,
    )
    expected = np.take(x[1], indices)
    if masked:
      expected = np.where(mask != 0, expected, -1)
    np.testing.assert_array_equal(out, expected)
    self.assertFalse(mosaic_interpret.races.races_found)

  @parameterized.parameters(False, True)
  def test_store_scatter(self, masked):
    rng = np.random.default_rng(1)
    x = rng.integers(-100, 100, (8,)).astype(np.int32)
    # Distinct indices, so the result does not depend on the order of writes.
    indices = rng.permutation(16)[:8].astype(np.int32)
    mask = rng.integers(0, 2, (8,)).astype(np.int32)

    def body(x_vmem, i_vmem, m_vmem, o_vmem):
      o_vmem[...] = jnp.zeros((16,), jnp.int32)
      m = (m_vmem[...] != 0) if masked else None
      plsc.store_scatter(o_vmem, [i_vmem[...]], x_vmem[...], mask=m)

    out = self._run_on_subcore_0(
        body, jax.ShapeDtypeStruct((16,), jnp.int32), x, indices, mask
    )
    expected = np.zeros(16, np.int32)
    selected = mask != 0 if masked else np.ones(8, bool)
    np.put(expected, indices[selected], x[selected])
    np.testing.assert_array_equal(out, expected)

  def test_addupdate_scatter_adds_repeated_indices(self):
    x = np.arange(1, 9, dtype=np.int32)
    indices = np.array([3, 0, 3, 5, 0, 3, 7, 1], np.int32)

    def body(x_vmem, i_vmem, o_vmem):
      o_vmem[...] = jnp.full((8,), 100, jnp.int32)
      plsc.addupdate_scatter(o_vmem, [i_vmem[...]], x_vmem[...])

    out = self._run_on_subcore_0(
        body, jax.ShapeDtypeStruct((8,), jnp.int32), x, indices
    )
    expected = np.full(8, 100, np.int32)
    np.add.at(expected, indices, x)
    np.testing.assert_array_equal(out, expected)

  @parameterized.parameters(False, True)
  def test_addupdate_scatter_from_every_subcore_loses_no_update(
      self, detect_races
  ):
    # The 16 subcores add to the same elements of one collective VMEM buffer
    # concurrently; each addition is atomic, so none is lost, and race
    # detection reports the unordered additions. Python switches threads often
    # here so that the additions interleave, which makes a lost update likely
    # but not certain: this test catches a non-atomic addition by chance.
    self.addCleanup(sys.setswitchinterval, sys.getswitchinterval())
    sys.setswitchinterval(1e-6)
    num_additions = 64

    @self._sparse_core_kernel(
        jax.ShapeDtypeStruct((8,), jnp.int32),
        num_cores=1,
        detect_races=detect_races,
        allow_collective_axes_in_run_scoped=True,
    )
    def kernel(o_ref):
      subcore = jax.lax.axis_index('subcore')

      def body(shared_ref):
        @pl.when(subcore == 0)
        def _():
          shared_ref[...] = jnp.zeros((8,), jnp.int32)

        plsc.subcore_barrier()
        lanes = jax.lax.broadcasted_iota(jnp.int32, (8,), 0)

        @pl.loop(0, num_additions)
        def _(i):
          plsc.addupdate_scatter(
              shared_ref, [lanes], jnp.full((8,), subcore + 1, jnp.int32)
          )

        plsc.subcore_barrier()

        @pl.when(subcore == 0)
        def _():
          pltpu.sync_copy(shared_ref, o_ref)

      pl.run_scoped(
          body, pltpu.VMEM((8,), jnp.int32), collective_axes='subcore'
      )

    np.testing.assert_array_equal(
        kernel(), np.full(8, num_additions * sum(range(1, 17)), np.int32)
    )
    if detect_races:
      self.assertTrue(mosaic_interpret.races.races_found)

  @parameterized.parameters(
      ('load_gather', 'Gather only supports loading from VMEM'),
      ('store_scatter', 'Scatter only supports storing to VMEM'),
      ('addupdate_scatter', 'Scatter only supports storing to VMEM'),
  )
  def test_gather_and_scatter_outside_vmem_raise(self, op, message):
    # As Mosaic's SparseCore lowering does, for a VMEM_SHARED ref.
    @self._sparse_core_kernel(
        jax.ShapeDtypeStruct((8,), jnp.int32),
        pltpu.VMEM_SHARED((8,), jnp.int32),
        num_cores=1,
    )
    def kernel(o_ref, shared_ref):
      lanes = jax.lax.broadcasted_iota(jnp.int32, (8,), 0)
      if op == 'load_gather':
        plsc.load_gather(shared_ref, [lanes])
      else:
        getattr(plsc, op)(shared_ref, [lanes], lanes)
      pltpu.sync_copy(shared_ref, o_ref)

    with self.assertRaisesRegex(ValueError, message):
      kernel()

  def test_masked_load_in_tensorcore_kernel_raises(self):
    # Only Mosaic's SparseCore lowering supports masked loads.
    def kernel(x_ref, o_ref):
      m = jax.lax.broadcasted_iota(jnp.int32, (8, 128), 1) < 5
      o_ref[...] = pltpu.load(x_ref, mask=m)

    f = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.int32),
        interpret=test_util.interpret_params(),
    )
    with self.assertRaisesRegex(NotImplementedError, 'masked load_p'):
      f(jnp.zeros((8, 128), jnp.int32))

  def test_out_of_bounds_gather_raises(self):
    def body(x_vmem, o_vmem):
      lanes = jax.lax.broadcasted_iota(jnp.int32, (8,), 0)
      o_vmem[...] = plsc.load_gather(x_vmem, [lanes + 1])

    with self.assertRaisesRegex(
        jax.errors.JaxRuntimeError,
        r'Out-of-bounds gather .* element 7 reads \(8,\)',
    ):
      self._run_on_subcore_0(
          body, jax.ShapeDtypeStruct((8,), jnp.int32), np.zeros(8, np.int32)
      )
    test_util.reset_after_failure()

  def test_parallel_loop(self):
    x = np.arange(32, dtype=np.int32)

    def body(x_vmem, o_vmem, sum_vmem):
      @plsc.parallel_loop(0, 32, 8)
      def _(i):
        x_vmem[pl.ds(i, 8)] += 1

      @plsc.parallel_loop(0, 32, 8, carry=jnp.zeros(8, jnp.int32))
      def total(i, acc):
        return acc + x_vmem[pl.ds(i, 8)]

      o_vmem[...] = x_vmem[...]
      sum_vmem[...] = total

    out, total = self._run_on_subcore_0(
        body,
        (jax.ShapeDtypeStruct((32,), jnp.int32),
         jax.ShapeDtypeStruct((8,), jnp.int32)),
        x,
    )
    np.testing.assert_array_equal(out, x + 1)
    np.testing.assert_array_equal(total, (x + 1).reshape(-1, 8).sum(axis=0))


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
