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

"""Tests of SparseCore `plsc.bitcast` in TPU interpret mode.

To work around https://github.com/jax-ml/jax/issues/25671 , this file
contains only tests that do not use shard_map.
"""

from absl.testing import absltest
from absl.testing import parameterized
import jax
from jax._src import test_util as jtu
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas import tpu_sc as plsc
import jax.numpy as jnp
import numpy as np
import tpu_interpret_test_util as test_util


jax.config.parse_flags_with_absl()


# TODO(jburnim): Figure out how to safely run different instance of TPU
# interpret mode in parallel, and then remove this decorator.
@jtu.thread_unsafe_test_class()
class InterpretSparseCoreBitcastTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 10, 0):
      self.skipTest(
          'jax 0.9.x and older: their series (maintenance-only) have no'
          ' SparseCore patches'
      )
    # Older jax releases: end.

  def _sparse_core_bitcast(self, x, dtype):
    """Returns `plsc.bitcast(x, dtype)` of a SparseCore kernel on a TPU v6e."""
    self.enter_context(jax.sharding.use_abstract_mesh(
        jax.sharding.AbstractMesh((), (), abstract_device=test_util.tpu_v6e())))
    out_type = jax.ShapeDtypeStruct(
        (x.size * x.dtype.itemsize // np.dtype(dtype).itemsize,), dtype)

    @test_util.kernel(
        out_type=out_type,
        mesh=plsc.VectorSubcoreMesh(
            core_axis_name='core', subcore_axis_name='subcore', num_cores=1,
            num_subcores=1,
        ),
        scratch_types=[
            pltpu.VMEM(x.shape, x.dtype),
            pltpu.VMEM(out_type.shape, dtype),
        ],
        interpret=test_util.interpret_params(),
    )
    def kernel(x_hbm, o_hbm, x_ref, o_ref):
      pltpu.sync_copy(x_hbm, x_ref)
      # Older jax releases: begin.
      # At jax HEAD: o_ref[...] = plsc.bitcast(x_ref[...], dtype)
      if jax.__version_info__ >= (0, 12, 0):
        # jax 0.12 deprecates plsc.bitcast for this, its equivalent.
        o_ref[...] = pltpu.bitcast(x_ref[...], dtype, dim=-1)
      else:
        o_ref[...] = plsc.bitcast(x_ref[...], dtype)
      # Older jax releases: end.
      pltpu.sync_copy(o_ref, o_hbm)

    return np.asarray(jax.block_until_ready(kernel(x)))

  @parameterized.parameters(
      (np.int32, np.int8),
      (np.int32, np.int16),
      (np.int32, np.float32),
      (np.int16, np.int32),
      (np.int8, np.int32),
      (np.float32, jnp.bfloat16),
  )
  def test_bitcast_is_a_numpy_view(self, dtype, new_dtype):
    # As upstream's hardware test `test_bitcast`: consecutive elements along
    # the minormost dimension pack into one, the first in the lowest bits.
    # 32 random bytes (8 lanes of 32 bits), compared bit for bit.
    x = np.random.default_rng(0).integers(0, 256, 32, np.uint8).view(dtype)
    out = self._sparse_core_bitcast(x, new_dtype)
    expected = x.view(new_dtype)
    self.assertEqual((out.dtype, out.shape), (expected.dtype, expected.shape))
    np.testing.assert_array_equal(out.view(np.uint8), expected.view(np.uint8))


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
