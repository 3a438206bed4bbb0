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

"""Tests for memory space constraints of inputs in TPU interpret mode.

To work around https://github.com/jax-ml/jax/issues/25671 , this file
contains only tests that do not use shard_map.
"""

from absl.testing import absltest
from absl.testing import parameterized
import jax
from jax._src import test_util as jtu
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
import jax.numpy as jnp
import numpy as np
import tpu_interpret_test_util as test_util


jax.config.parse_flags_with_absl()


# TODO(jburnim): Figure out how to safely run different instance of TPU
# interpret mode in parallel, and then remove this decorator.
@jtu.thread_unsafe_test_class()
class InterpretMemorySpaceConstraintTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 10, 0):
      self.skipTest(
          'jax 0.9 and older: their series (maintenance-only) have no'
          ' memory-space patch'
      )
    # Older jax releases: end.

  @parameterized.parameters(pltpu.VMEM, pltpu.SMEM, pltpu.HBM)
  def test_input_memory_space_constraint(self, memory_space):
    def kernel(x_ref, o_ref):
      pltpu.sync_copy(x_ref, o_ref)

    @jax.jit
    def f(x):
      x = pltpu.with_memory_space_constraint(x, memory_space=memory_space)
      self.assertEqual(jax.typeof(x).memory_space, memory_space)
      return pl.pallas_call(
          kernel,
          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
          in_specs=[pl.BlockSpec(memory_space=memory_space)],
          out_specs=pl.BlockSpec(memory_space=pl.ANY),
          interpret=pltpu.InterpretParams(),
      )(x)

    x = np.arange(8 * 128, dtype=np.float32).reshape(8, 128)
    np.testing.assert_array_equal(f(x), x)

  def test_constrained_input_is_blocked_by_its_block_spec(self):
    # A VMEM-constrained input of a grid kernel: each step sees the block of
    # its BlockSpec, as for an unconstrained input.
    def kernel(x_ref, o_ref):
      o_ref[...] = x_ref[...] * 2 + pl.program_id(0).astype(jnp.float32)

    @jax.jit
    def f(x):
      x = pltpu.with_memory_space_constraint(x, memory_space=pltpu.VMEM)
      return pl.pallas_call(
          kernel,
          grid=(4,),
          in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
          out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
          interpret=pltpu.InterpretParams(),
      )(x)

    x = np.arange(32 * 128, dtype=np.float32).reshape(32, 128)
    expected = x * 2 + np.repeat(np.arange(4, dtype=np.float32), 8)[:, None]
    np.testing.assert_array_equal(f(x), expected)


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
