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

"""Tests for SparseCore vector sorts, scans and mask reductions.

`plsc.sort_key_val`, `plsc.cumsum`, `plsc.cummax`, `cummin`,
`plsc.all_reduce_population_count` and `plsc.all_reduce_ffs` have no CPU
lowering; TPU interpret mode evaluates them with jax.numpy. The expected
values are computed here in Python, element by element, from the
primitives' docstrings. The kernels run on subcore 0 of a TPU v6e
SparseCore (vectors of 8 lanes), described by an abstract mesh, on CPU.

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
import numpy as np
import tpu_interpret_test_util as test_util


jax.config.parse_flags_with_absl()


# TODO(jburnim): Figure out how to safely run different instance of TPU
# interpret mode in parallel, and then remove this decorator.
@jtu.thread_unsafe_test_class()
class InterpretSparseCoreVectorTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 11, 0):
      self.skipTest(
          'jax 0.10.2 and older: their series have no patch for SparseCore'
          ' vector sorts, scans and mask reductions'
      )
    # Older jax releases: end.

  def _run_vector_kernel(self, body, inputs, out_types):
    """Runs `body` on subcore 0 of a SparseCore; returns its outputs.

    Args:
      body: Takes the inputs' values, vectors of 8 lanes, and returns the
        outputs' values.
      inputs: 1-D numpy arrays of 8 elements.
      out_types: `jax.ShapeDtypeStruct`s of the outputs.
    """
    self.enter_context(jax.sharding.use_abstract_mesh(
        jax.sharding.AbstractMesh((), (), abstract_device=test_util.tpu_v6e())))
    num_inputs = len(inputs)

    @test_util.kernel(
        out_type=tuple(out_types),
        mesh=plsc.VectorSubcoreMesh(
            core_axis_name='core', subcore_axis_name='subcore', num_cores=1
        ),
        scratch_types=(
            *(pltpu.VMEM(x.shape, x.dtype) for x in inputs),
            *(pltpu.VMEM(t.shape, t.dtype) for t in out_types),
        ),
        interpret=test_util.interpret_params(),
    )
    def kernel(*refs):
      hbm, vmem = refs[:len(refs) // 2], refs[len(refs) // 2:]

      @pl.when(jax.lax.axis_index('subcore') == 0)
      def _():
        for src, dst in zip(hbm[:num_inputs], vmem[:num_inputs]):
          pltpu.sync_copy(src, dst)
        outs = body(*(ref[...] for ref in vmem[:num_inputs]))
        for ref, out in zip(vmem[num_inputs:], outs):
          ref[...] = out
        for src, dst in zip(vmem[num_inputs:], hbm[num_inputs:]):
          pltpu.sync_copy(src, dst)

    return [np.asarray(o) for o in jax.block_until_ready(kernel(*inputs))]

  @parameterized.product(
      keys_dtype=(np.uint32, np.int32, np.float32),
      use_mask=(False, True),
      descending=(False, True),
  )
  def test_sort_key_val(self, keys_dtype, use_mask, descending):
    # Equal keys (lanes 1 and 5) check stability; for uint32 the keys above
    # 2**31 check the unsigned order, for int32 the negative ones the signed.
    if keys_dtype == np.uint32:
      keys = np.array([7, 2**31 + 5, 3, 2**32 - 1, 0, 2**31 + 5, 9, 1])
    else:
      keys = np.array([7, -5, 3, 100, 0, -5, -9, 1])
    keys = keys.astype(keys_dtype)
    values = np.arange(8, dtype=np.int32) * 10
    mask = np.array([1, 1, 0, 1, 1, 1, 0, 1], np.int32)
    if not use_mask:
      mask[:] = 1

    def body(keys, values, mask):
      return plsc.sort_key_val(
          keys, values, mask=(mask != 0) if use_mask else None,
          descending=descending,
      )

    out_types = [jax.ShapeDtypeStruct((8,), keys_dtype),
                 jax.ShapeDtypeStruct((8,), np.int32)]
    if use_mask:
      out_types.append(jax.ShapeDtypeStruct((8,), np.bool_))
    outs = self._run_vector_kernel(body, [keys, values, mask], out_types)
    # Set lanes first, by key (Python's sort is stable), then the others in
    # their order.
    order = sorted(
        range(8),
        key=lambda i: (0, -int(keys[i]) if descending else int(keys[i]))
        if mask[i] else (1, 0),
    )
    np.testing.assert_array_equal(outs[0], keys[order])
    np.testing.assert_array_equal(outs[1], values[order])
    if use_mask:
      np.testing.assert_array_equal(outs[2], np.arange(8) < mask.sum())

  @parameterized.product(
      op=('cumsum', 'cummax', 'cummin'),
      dtype=(np.int32, np.uint32, np.float32),
      mask_bits=(0xFF, 0b10110100, 0),
  )
  def test_masked_scan(self, op, dtype, mask_bits):
    x = np.array([5, 9, 2, 7, 1, 8, 3, 6]).astype(dtype)
    mask = ((mask_bits >> np.arange(8)) & 1).astype(np.int32)
    if op == 'cummin':
      # `plsc` does not export `cummin`. (Imported here: on jax 0.7.2,
      # importing it before `jax.experimental.pallas` is a circular import.)
      from jax._src.pallas.mosaic import sc_primitives  # pylint: disable=g-import-not-at-top
      scan = sc_primitives.cummin
    else:
      scan = getattr(plsc, op)
    combine = {'cumsum': lambda a, b: a + b, 'cummax': max,
               'cummin': min}[op]

    def body(x, mask):
      return (scan(x, mask=mask != 0),)

    [out] = self._run_vector_kernel(
        body, [x, mask], [jax.ShapeDtypeStruct((8,), dtype)])
    # Lanes before the first set one pass through; then the set lanes so far.
    expected, acc = [], None
    for xi, mi in zip(x.tolist(), mask):
      if mi:
        acc = xi if acc is None else combine(acc, xi)
      expected.append(xi if acc is None else acc)
    np.testing.assert_array_equal(out, np.array(expected, dtype))

  @parameterized.product(
      mask_bits=(0, 0b00000100, 0b10110100, 0xFF), reduce=(1, 2)
  )
  def test_mask_all_reduce(self, mask_bits, reduce):
    mask = ((mask_bits >> np.arange(8)) & 1).astype(np.int32)

    def body(mask):
      return (plsc.all_reduce_population_count(mask != 0, reduce=reduce),
              plsc.all_reduce_ffs(mask != 0, reduce=reduce))

    out_type = jax.ShapeDtypeStruct((8 // reduce,), np.int32)
    count, first = self._run_vector_kernel(body, [mask], [out_type] * 2)
    set_lanes = [i for i in range(8) if mask[i]]
    np.testing.assert_array_equal(count, [len(set_lanes)] * (8 // reduce))
    np.testing.assert_array_equal(
        first, [set_lanes[0] if set_lanes else 8] * (8 // reduce))


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
