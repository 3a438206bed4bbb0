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

"""Tests for SparseCore `plsc.scan_count` in TPU interpret mode.

`plsc.scan_count` has no CPU lowering; TPU interpret mode evaluates it with
jax.numpy. The expected values are counted here in Python, element by
element, from the description of Mosaic's `tpu.scan_count`. The kernel runs
on subcore 0 of a TPU v6e SparseCore (vectors of 8 lanes), described by an
abstract mesh, on CPU.

To work around https://github.com/jax-ml/jax/issues/25671 , this file
contains only tests that do not use shard_map.
"""

import collections

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
class InterpretSparseCoreScanCountTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 11, 0):
      self.skipTest(
          'jax 0.10.2 and older: their series have no patch for SparseCore'
          ' scan_count'
      )
    # Older jax releases: end.

  @parameterized.product(
      dtype=(np.int32, np.uint32, np.float32), mask_bits=(None, 0b11011011)
  )
  def test_scan_count(self, dtype, mask_bits):
    # 3 occurs at lanes 0, 2, 5 and 7, 1 at lanes 1 and 6; lanes 2 and 5 are
    # not set in the mask.
    x = np.array([3, 1, 3, 4, 2, 3, 1, 3]).astype(dtype)
    if mask_bits is None:
      mask = np.ones(8, np.int32)
    else:
      mask = ((mask_bits >> np.arange(8)) & 1).astype(np.int32)
    self.enter_context(jax.sharding.use_abstract_mesh(
        jax.sharding.AbstractMesh((), (), abstract_device=test_util.tpu_v6e())))

    @test_util.kernel(
        out_type=(jax.ShapeDtypeStruct((8,), jnp.int32),) * 2,
        mesh=plsc.VectorSubcoreMesh(
            core_axis_name='core', subcore_axis_name='subcore', num_cores=1
        ),
        scratch_types=[pltpu.VMEM((8,), dtype)]
        + [pltpu.VMEM((8,), jnp.int32)] * 3,
        interpret=test_util.interpret_params(),
    )
    def kernel(x_hbm, mask_hbm, counts_hbm, last_hbm, x, m, counts, last):
      @pl.when(jax.lax.axis_index('subcore') == 0)
      def _():
        pltpu.sync_copy(x_hbm, x)
        pltpu.sync_copy(mask_hbm, m)
        counts[...], last_mask = plsc.scan_count(
            x[...], None if mask_bits is None else m[...] != 0
        )
        last[...] = last_mask.astype(jnp.int32)
        pltpu.sync_copy(counts, counts_hbm)
        pltpu.sync_copy(last, last_hbm)

    counts, last = kernel(x, mask)
    # Counted lanes count their value's counted lanes so far; the others 1.
    expected_counts, seen = [], collections.Counter()
    for xi, mi in zip(x.tolist(), mask):
      seen[xi] += int(mi)
      expected_counts.append(seen[xi] if mi else 1)
    # A counted lane is the last if no later lane counts its value.
    expected_last = [
        bool(mask[i]) and not any(
            mask[j] and x[j] == x[i] for j in range(i + 1, 8))
        for i in range(8)
    ]
    np.testing.assert_array_equal(counts, expected_counts)
    np.testing.assert_array_equal(last, np.array(expected_last, np.int32))


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
