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

"""Tests of the block copies between a grid's operands and kernel buffers.

The copies of blocks of pallas_call inputs to the kernel's buffers before a
grid step, and of the kernel's output buffers to blocks of the outputs after
it, in TPU interpret mode.

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
from tpu_interpret_test_util import mosaic_interpret


jax.config.parse_flags_with_absl()


# TODO(jburnim): Figure out how to safely run different instance of TPU
# interpret mode in parallel, and then remove this decorator.
@jtu.thread_unsafe_test_class()
class InterpretBlockCopyTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 10, 1):
      self.skipTest(
          'jax 0.10.0 and older: their series have no block-copy patch'
      )
    # Older jax releases: end.

  @parameterized.parameters(False, True)
  def test_input_block_index_repeats_and_changes(self, detect_races):
    # Input block i // 2 at step i: blocks 0, 0, 1, 1, 2, 2, so the copy of
    # the input block is skipped at every second step and the kernel sees
    # the block copied at the step before.
    def kernel(x_ref, o_ref):
      o_ref[...] = x_ref[...] * 2.0 + pl.program_id(0).astype(jnp.float32)

    x = np.arange(3 * 8 * 128, dtype=np.float32).reshape(3 * 8, 128)
    y = pl.pallas_call(
        kernel,
        grid=(6,),
        in_specs=[pl.BlockSpec((8, 128), lambda i: (i // 2, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct((6 * 8, 128), np.float32),
        interpret=test_util.interpret_params(
            detect_races=detect_races, on_race='warn'
        ),
    )(x)

    expected = np.concatenate(
        [x[(i // 2) * 8:(i // 2 + 1) * 8] * 2.0 + i for i in range(6)]
    )
    np.testing.assert_array_equal(y, expected)
    if detect_races:
      self.assertFalse(mosaic_interpret.races.races_found)

  @parameterized.parameters(False, True)
  def test_output_block_revisited_across_consecutive_steps(
      self, detect_races
  ):
    # A blocked matmul: output block (i, j) is accumulated in place over the
    # steps k = 0, 1, 2 and copied out when (i, j) changes.
    def kernel(x_ref, y_ref, o_ref):
      @pl.when(pl.program_id(2) == 0)
      def _():
        o_ref[...] = jnp.zeros_like(o_ref)

      o_ref[...] += jnp.dot(
          x_ref[...], y_ref[...], preferred_element_type=jnp.float32
      )

    rng = np.random.default_rng(0)
    # Small integers, so that every sum is exact in float32.
    x = rng.integers(-4, 5, (16, 3 * 128)).astype(np.float32)
    y = rng.integers(-4, 5, (3 * 128, 2 * 128)).astype(np.float32)
    z = pl.pallas_call(
        kernel,
        grid=(2, 2, 3),
        in_specs=[
            pl.BlockSpec((8, 128), lambda i, j, k: (i, k)),
            pl.BlockSpec((128, 128), lambda i, j, k: (k, j)),
        ],
        out_specs=pl.BlockSpec((8, 128), lambda i, j, k: (i, j)),
        out_shape=jax.ShapeDtypeStruct((16, 2 * 128), np.float32),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=('parallel', 'parallel', 'arbitrary')
        ),
        interpret=test_util.interpret_params(
            detect_races=detect_races, on_race='warn'
        ),
    )(x, y)

    np.testing.assert_array_equal(z, x @ y)
    if detect_races:
      self.assertFalse(mosaic_interpret.races.races_found)

  def test_out_of_bounds_input_block_raises(self):
    def kernel(x_ref, o_ref):
      o_ref[...] = x_ref[...]

    x = np.ones((16, 128), np.float32)
    call = pl.pallas_call(
        kernel,
        grid=(2,),
        # Block 2 at step 1: rows 16 to 24 of a 16-row input.
        in_specs=[pl.BlockSpec((8, 128), lambda i: (2 * i, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        interpret=pltpu.InterpretParams(),
    )
    with self.assertRaisesRegex(
        Exception,
        r'Out-of-bounds block index \(2, 0\) for input "x_ref" in iteration'
        r' \(1,\)',
    ):
      jax.block_until_ready(call(x))
    test_util.reset_after_failure()

  @parameterized.named_parameters(
      # Both cores copy their output block to block 0 of the output: the
      # copies write the same HBM slice.
      ('write_write', lambda i: (i, 0), lambda i: (0, 0), {}, True),
      # The output is the input (aliased): core 1 copies input block 0 in
      # while core 0 copies its output block 0 out.
      ('read_write', lambda i: (0, 0), lambda i: (i, 0), {0: 0}, True),
      # Each core copies its own blocks: no race.
      ('none', lambda i: (i, 0), lambda i: (i, 0), {0: 0}, False),
  )
  def test_race_between_block_copies_of_two_cores(
      self, in_index_map, out_index_map, aliases, expect_race
  ):
    def kernel(x_ref, o_ref):
      o_ref[...] = x_ref[...] + 1.0

    x = np.arange(16 * 128, dtype=np.float32).reshape(16, 128)
    y = pl.pallas_call(
        kernel,
        grid=(2,),
        in_specs=[pl.BlockSpec((8, 128), in_index_map)],
        out_specs=pl.BlockSpec((8, 128), out_index_map),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        input_output_aliases=aliases,
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=('parallel',)
        ),
        interpret=test_util.interpret_params(
            num_cores_or_threads=2, detect_races=True, on_race='warn'
        ),
    )(x)

    self.assertEqual(mosaic_interpret.races.races_found, expect_race)
    if not expect_race:
      np.testing.assert_array_equal(y, x + 1.0)


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
