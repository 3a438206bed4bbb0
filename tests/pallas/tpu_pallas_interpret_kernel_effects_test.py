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

"""Tests for kernel primitives that read or write refs, in TPU interpret mode.

SparseCore's compressed and expanding accesses (`plsc.load_expanded`,
`plsc.store_compressed`, `plsc.addupdate`, `plsc.addupdate_compressed`) and
`plsc.fetch_and_add`, which the interpreter once bound with a buffer id in
place of the ref (a jax tracing error), and a primitive without an
interpreter rule that reads a ref, which raises `NotImplementedError`.
The kernels run on the subcores of a TPU v6e SparseCore (16 subcores of
8 lanes), described by an abstract mesh, on CPU.

To work around https://github.com/jax-ml/jax/issues/25671 , this file
contains only tests that do not use shard_map.
"""

from absl.testing import absltest
from absl.testing import parameterized
import jax
from jax._src import core as jax_core
from jax._src import test_util as jtu
from jax._src.state import types as state_types
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
class InterpretSparseCoreRefEffectsTest(test_util.InterpretTestCase):

  @staticmethod
  def _expanded_in_numpy(x, mask):
    """`plsc.load_expanded` in numpy: set element i gets x[#set before i]."""
    return np.where(mask, x[np.maximum(np.cumsum(mask) - 1, 0)], 0)

  @staticmethod
  def _mask_from_bits(bits):
    """A numpy bool mask of 8 lanes: lane i is bit i of `bits`."""
    return (bits >> np.arange(8)) & 1 == 1

  @staticmethod
  def _mask_in_kernel(mask):
    """`mask`, a 1-D numpy bool array, computed in a kernel.

    A kernel cannot close over an array constant, so it is built from its
    elements' bits.
    """
    bits = sum(1 << i for i, m in enumerate(mask) if m)
    iota = jax.lax.broadcasted_iota(jnp.int32, mask.shape, 0)
    return (jnp.int32(bits) >> iota) & 1 == 1

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 11, 0):
      self.skipTest(
          'jax 0.10.2 and older: their series have no patch for SparseCore'
          ' compressed accesses and fetch_and_add (0018)'
      )
    # Older jax releases: end.

  def _run_on_first_subcore(self, body, x, scratch_types=(), **params):
    """Runs `body(x_vmem, o_vmem, *scratch)` on subcore 0; returns o.

    Args:
      body: Fills `o_vmem`, an int32 VMEM buffer of `x`'s shape; `x_vmem` is
        a VMEM copy of `x`.
      x: A 1-D int32 numpy array.
      scratch_types: More scratch buffers for `body`.
      **params: `InterpretParams` fields.
    """
    self.enter_context(jax.sharding.use_abstract_mesh(
        jax.sharding.AbstractMesh((), (), abstract_device=test_util.tpu_v6e())))

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
        interpret=test_util.interpret_params(on_race='warn', **params),
    )
    def kernel(x_hbm, o_hbm, x_vmem, o_vmem, *scratch):
      @pl.when(jax.lax.axis_index('subcore') == 0)
      def _():
        pltpu.sync_copy(x_hbm, x_vmem)
        body(x_vmem, o_vmem, *scratch)
        pltpu.sync_copy(o_vmem, o_hbm)

    return np.asarray(jax.block_until_ready(kernel(x)))

  # Masks of 8 lanes as bits (lane i is bit i): all, none, some, the last.
  @parameterized.product(
      mask_bits=(0xFF, 0, 0b01001101, 0x80), detect_races=(False, True)
  )
  def test_load_expanded(self, mask_bits, detect_races):
    x = np.arange(8, dtype=np.int32) + 10
    mask = self._mask_from_bits(mask_bits)

    def body(x_vmem, o_vmem):
      o_vmem[...] = plsc.load_expanded(
          x_vmem.at[...], mask=self._mask_in_kernel(mask)
      )

    out = self._run_on_first_subcore(body, x, detect_races=detect_races)
    # Elements the mask does not set are undefined.
    np.testing.assert_array_equal(
        out[mask], self._expanded_in_numpy(x, mask)[mask]
    )

  @parameterized.parameters(3, 4)
  def test_load_expanded_reads_only_as_many_elements_as_set(self, num_set):
    # The window starts at 9 of a buffer of 12: its first 3 elements are in
    # bounds, so expanding 3 elements reads in bounds and 4 does not.
    x = np.arange(12, dtype=np.int32) + 10
    mask = np.arange(8) % 2 == 0
    mask[2 * num_set:] = False

    def body(x_vmem, o_vmem):
      o_vmem[...] = jnp.zeros((12,), jnp.int32)
      # A traced start, which jax does not bounds-check at trace time.
      start = jax.lax.axis_index('subcore') + 9
      o_vmem[pl.ds(0, 8)] = plsc.load_expanded(
          x_vmem.at[pl.ds(start, 8)], mask=self._mask_in_kernel(mask)
      )

    run = lambda: self._run_on_first_subcore(body, x)
    if num_set == 3:
      out = run()
      np.testing.assert_array_equal(out[:8][mask], [19, 20, 21])
    else:
      with self.assertRaisesRegex(
          jax.errors.JaxRuntimeError, r'Out-of-bounds masked read'
      ):
        run()
      test_util.reset_after_failure()

  # Masks of 8 lanes as bits (lane i is bit i): all, none, some, the last.
  @parameterized.product(
      mask_bits=(0xFF, 0, 0b01001101, 0x80), detect_races=(False, True)
  )
  def test_store_compressed(self, mask_bits, detect_races):
    x = np.arange(8, dtype=np.int32) + 10
    mask = self._mask_from_bits(mask_bits)

    def body(x_vmem, o_vmem):
      o_vmem[...] = jnp.full((8,), -1, jnp.int32)
      plsc.store_compressed(
          o_vmem.at[...], x_vmem[...] * 2, mask=self._mask_in_kernel(mask)
      )

    out = self._run_on_first_subcore(body, x, detect_races=detect_races)
    k = mask.sum()
    expected = np.full(8, -1, np.int32)
    expected[:k] = 2 * x[mask]
    np.testing.assert_array_equal(out, expected)

  def test_store_compressed_to_a_window(self):
    x = np.arange(16, dtype=np.int32) + 10
    mask = np.arange(8) % 3 == 0

    def body(x_vmem, o_vmem):
      o_vmem[...] = jnp.full((16,), -1, jnp.int32)
      plsc.store_compressed(
          o_vmem.at[pl.ds(5, 8)],
          x_vmem[pl.ds(2, 8)],
          mask=self._mask_in_kernel(mask),
      )

    out = self._run_on_first_subcore(body, x)
    expected = np.full(16, -1, np.int32)
    expected[5:5 + mask.sum()] = x[2:10][mask]
    np.testing.assert_array_equal(out, expected)

  def test_addupdate(self):
    x = np.arange(8, dtype=np.int32) + 10

    def body(x_vmem, o_vmem):
      o_vmem[...] = x_vmem[...]
      for i in range(3):
        plsc.addupdate(o_vmem.at[...], jnp.full((8,), 100 * (i + 1), jnp.int32))

    np.testing.assert_array_equal(self._run_on_first_subcore(body, x), x + 600)

  # Masks of 8 lanes as bits (lane i is bit i): all, none, some, the last.
  @parameterized.product(
      mask_bits=(0xFF, 0, 0b01001101, 0x80), detect_races=(False, True)
  )
  def test_addupdate_compressed(self, mask_bits, detect_races):
    x = np.arange(8, dtype=np.int32) + 10
    mask = self._mask_from_bits(mask_bits)

    def body(x_vmem, o_vmem):
      o_vmem[...] = jnp.ones((8,), jnp.int32)
      for _ in range(2):
        plsc.addupdate_compressed(
            o_vmem.at[...], x_vmem[...], mask=self._mask_in_kernel(mask)
        )

    out = self._run_on_first_subcore(body, x, detect_races=detect_races)
    expected = np.ones(8, np.int32)
    expected[:mask.sum()] += 2 * x[mask]
    np.testing.assert_array_equal(out, expected)

  def test_addupdate_compressed_from_every_subcore_to_vmem_shared(self):
    # The 16 subcores add to the same VMEM_SHARED words at once; each
    # addition is atomic, so none is lost.
    self.enter_context(jax.sharding.use_abstract_mesh(
        jax.sharding.AbstractMesh((), (), abstract_device=test_util.tpu_v6e())))
    mask = np.arange(8) < 5

    @test_util.kernel(
        out_type=jax.ShapeDtypeStruct((8,), jnp.int32),
        mesh=plsc.VectorSubcoreMesh(
            core_axis_name='core', subcore_axis_name='subcore', num_cores=1
        ),
        scratch_types=(
            pltpu.VMEM_SHARED((8,), jnp.int32),
            pltpu.VMEM((8,), jnp.int32),
        ),
        interpret=test_util.interpret_params(),
    )
    def kernel(o_hbm, shared, zeros):
      subcore = jax.lax.axis_index('subcore')

      @pl.when(subcore == 0)
      def _():
        zeros[...] = jnp.zeros((8,), jnp.int32)
        pltpu.sync_copy(zeros, shared)

      plsc.subcore_barrier()
      values = jax.lax.broadcasted_iota(jnp.int32, (8,), 0) + 100 * subcore
      plsc.addupdate_compressed(
          shared.at[...], values, mask=self._mask_in_kernel(mask)
      )
      plsc.subcore_barrier()

      @pl.when(subcore == 0)
      def _():
        pltpu.sync_copy(shared, o_hbm)

    expected = np.zeros(8, np.int32)
    expected[:5] = sum(np.arange(5) + 100 * s for s in range(16))
    np.testing.assert_array_equal(jax.block_until_ready(kernel()), expected)

  @parameterized.parameters(False, True)
  def test_fetch_and_add_to_the_next_subcore(self, detect_races):
    # Each subcore writes its id to its SMEM, then adds 10 to the next
    # subcore's, and reads the old value and its own value after the adds.
    self.enter_context(jax.sharding.use_abstract_mesh(
        jax.sharding.AbstractMesh((), (), abstract_device=test_util.tpu_v6e())))
    n = 16

    @test_util.kernel(
        out_type=jax.ShapeDtypeStruct((n, 2, 8), jnp.int32),
        mesh=plsc.VectorSubcoreMesh(
            core_axis_name='core', subcore_axis_name='subcore', num_cores=1
        ),
        scratch_types=(
            pltpu.VMEM((2, 8), jnp.int32),
            pltpu.SMEM((2,), jnp.int32),
        ),
        interpret=test_util.interpret_params(
            detect_races=detect_races, on_race='warn'
        ),
    )
    def kernel(o_hbm, vmem, smem):
      subcore = jax.lax.axis_index('subcore')
      smem[0] = 0
      smem[1] = subcore
      plsc.subcore_barrier()
      old = plsc.fetch_and_add(
          smem.at[1], 10 * (subcore + 1), subcore_id=(subcore + 1) % n
      )
      plsc.subcore_barrier()
      vmem[0] = jnp.full((8,), old, jnp.int32)
      vmem[1] = jnp.full((8,), smem[1], jnp.int32)
      pltpu.sync_copy(vmem, o_hbm.at[subcore])

    out = np.asarray(jax.block_until_ready(kernel()))
    ids = np.arange(n)
    previous = (ids - 1) % n
    np.testing.assert_array_equal(out[:, 0, 0], (ids + 1) % n)
    np.testing.assert_array_equal(out[:, 1, 0], ids + 10 * (previous + 1))
    np.testing.assert_array_equal(out, np.repeat(out[:, :, :1], 8, axis=2))

  def test_primitive_without_a_rule_that_reads_a_ref_is_not_implemented(self):
    read_ref_p = jax_core.Primitive('test_read_ref')

    @read_ref_p.def_effectful_abstract_eval
    def _(ref):
      return (
          jax_core.ShapedArray(ref.shape, ref.dtype),
          {state_types.ReadEffect(0)},
      )

    x = np.arange(8, dtype=np.int32)

    def body(x_vmem, o_vmem):
      o_vmem[...] = read_ref_p.bind(x_vmem)

    with self.assertRaisesRegex(
        NotImplementedError, 'test_read_ref in TPU interpret mode'
    ):
      self._run_on_first_subcore(body, x)


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
