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

"""Tests of the copies of a grid step's input blocks, in TPU interpret mode.

Before each step of the grid, the blocks of the pallas_call inputs whose
block index changed since the previous step (all of them at a core's first
step) are copied to the kernel's buffers, all in one io_callback per step.
These tests count those callbacks and the blocks they copy, against counts
derived by hand from the index maps.

To work around https://github.com/jax-ml/jax/issues/25671 , this file
contains only tests that do not use shard_map.
"""

import contextlib
import threading

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
class InterpretStepCopyTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if not hasattr(mosaic_interpret, '_copy_input_blocks'):
      self.skipTest(
          'jax 0.10.x and older: their series have no step-copy patch'
      )
    # Older jax releases: end.

  @contextlib.contextmanager
  def _count_input_copies(self):
    """Counts the io_callbacks that copy input blocks, and the blocks copied.

    Wraps the function that runs every callback of the interpreter, and the
    interpreter's `copy_block`. Yields a dict whose entries, after the block,
    are `callbacks`: the io_callbacks that ran `copy_block` of an input
    block on their thread, and `blocks`: the input blocks copied.

    Yields:
      The counts.
    """
    counts = {'callbacks': 0, 'blocks': 0}
    module, name = mosaic_interpret.interpret_utils, 'interpret_callback_impl'
    if not hasattr(module, name):  # Before the callbacks got NumPy arrays.
      module, name = jax._src.callback, 'io_callback_impl'
    saved_impl = getattr(module, name)
    saved_copy_block = mosaic_interpret.copy_block
    lock = threading.Lock()
    # The input blocks copied on each thread (the cores run on threads).
    local = threading.local()

    def impl(*args, **kwargs):
      blocks_before = getattr(local, 'blocks', 0)
      result = saved_impl(*args, **kwargs)
      if getattr(local, 'blocks', 0) > blocks_before:
        with lock:
          counts['callbacks'] += 1
      return result

    def copy_block(*args, **kwargs):
      if kwargs.get('input_name') is not None:
        local.blocks = getattr(local, 'blocks', 0) + 1
        with lock:
          counts['blocks'] += 1
      return saved_copy_block(*args, **kwargs)

    setattr(module, name, impl)
    mosaic_interpret.copy_block = copy_block
    try:
      yield counts
    finally:
      setattr(module, name, saved_impl)
      mosaic_interpret.copy_block = saved_copy_block

  @parameterized.parameters(False, True)
  def test_step_copy_one_callback_for_all_inputs(self, detect_races):
    # Three inputs, all copied at every step (their block index is i): one
    # callback per step copies the three blocks.
    def kernel(x_ref, y_ref, z_ref, o_ref):
      o_ref[...] = x_ref[...] + 2.0 * y_ref[...] - z_ref[...]

    x, y, z = (
        np.arange(4 * 8 * 128, dtype=np.float32).reshape(4 * 8, 128) * s
        for s in (1.0, 0.5, -3.0)
    )
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    call = pl.pallas_call(
        kernel,
        grid=(4,),
        in_specs=[spec, spec, spec],
        out_specs=spec,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        interpret=test_util.interpret_params(
            detect_races=detect_races, on_race='warn'
        ),
    )
    with self._count_input_copies() as counts:
      out = jax.block_until_ready(call(x, y, z))

    np.testing.assert_array_equal(out, x + 2.0 * y - z)
    # 4 steps x 1 callback; 4 steps x 3 blocks.
    self.assertEqual(counts['callbacks'], 4)
    self.assertEqual(counts['blocks'], 12)
    if detect_races:
      self.assertFalse(mosaic_interpret.races.races_found)

  def test_step_copy_skips_unchanged_blocks_and_steps(self):
    # x's block index is i // 2, y's is always 0: at steps 0 and 2 a block
    # changes (both at step 0, x alone at step 2); at steps 1 and 3 none
    # does, and no callback runs.
    def kernel(x_ref, y_ref, o_ref):
      o_ref[...] = x_ref[...] * y_ref[...] + pl.program_id(0).astype(
          jnp.float32
      )

    x = np.arange(2 * 8 * 128, dtype=np.float32).reshape(2 * 8, 128)
    y = np.full((8, 128), 3.0, np.float32)
    call = pl.pallas_call(
        kernel,
        grid=(4,),
        in_specs=[
            pl.BlockSpec((8, 128), lambda i: (i // 2, 0)),
            pl.BlockSpec((8, 128), lambda i: (0, 0)),
        ],
        out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct((4 * 8, 128), np.float32),
        interpret=pltpu.InterpretParams(),
    )
    with self._count_input_copies() as counts:
      out = jax.block_until_ready(call(x, y))

    expected = np.concatenate(
        [x[(i // 2) * 8:(i // 2 + 1) * 8] * 3.0 + i for i in range(4)]
    )
    np.testing.assert_array_equal(out, expected)
    self.assertEqual(counts['callbacks'], 2)
    self.assertEqual(counts['blocks'], 3)

  def test_step_copy_blocked_matmul(self):
    # Grid (2, 2, 3), x block (i, k), y block (k, j): k changes at every
    # step, so both blocks are copied at all 12 steps, in one callback each.
    def kernel(x_ref, y_ref, o_ref, acc_ref):
      @pl.when(pl.program_id(2) == 0)
      def _():
        acc_ref[...] = jnp.zeros_like(acc_ref)

      acc_ref[...] += jnp.dot(
          x_ref[...], y_ref[...], preferred_element_type=jnp.float32
      )

      @pl.when(pl.program_id(2) == 2)
      def _():
        o_ref[...] = acc_ref[...]

    rng = np.random.default_rng(0)
    # Small integers, so that every sum is exact in float32.
    x = rng.integers(-4, 5, (16, 3 * 128)).astype(np.float32)
    y = rng.integers(-4, 5, (3 * 128, 2 * 128)).astype(np.float32)
    call = pl.pallas_call(
        kernel,
        grid=(2, 2, 3),
        in_specs=[
            pl.BlockSpec((8, 128), lambda i, j, k: (i, k)),
            pl.BlockSpec((128, 128), lambda i, j, k: (k, j)),
        ],
        out_specs=pl.BlockSpec((8, 128), lambda i, j, k: (i, j)),
        out_shape=jax.ShapeDtypeStruct((16, 2 * 128), np.float32),
        scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=('parallel', 'parallel', 'arbitrary')
        ),
        interpret=pltpu.InterpretParams(),
    )
    with self._count_input_copies() as counts:
      out = jax.block_until_ready(call(x, y))

    np.testing.assert_array_equal(out, x @ y)
    self.assertEqual(counts['callbacks'], 12)
    self.assertEqual(counts['blocks'], 24)

  def test_step_copy_scalar_prefetch_block_indices(self):
    # x's block index is s[i] for s = [0, 0, 1, 1, 0]: it changes at steps
    # 0, 2 and 4; the input in HBM (pl.ANY) is never copied.
    def kernel(s_ref, x_ref, w_hbm_ref, o_ref):
      del w_hbm_ref
      o_ref[...] = x_ref[...] + s_ref[pl.program_id(0)].astype(jnp.float32)

    s = np.array([0, 0, 1, 1, 0], np.int32)
    x = np.arange(2 * 8 * 128, dtype=np.float32).reshape(2 * 8, 128)
    w = np.zeros((8, 128), np.float32)
    call = pl.pallas_call(
        kernel,
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            grid=(5,),
            in_specs=[
                pl.BlockSpec((8, 128), lambda i, s_ref: (s_ref[i], 0)),
                pl.BlockSpec(memory_space=pl.ANY),
            ],
            out_specs=pl.BlockSpec((8, 128), lambda i, s_ref: (i, 0)),
        ),
        out_shape=jax.ShapeDtypeStruct((5 * 8, 128), np.float32),
        interpret=pltpu.InterpretParams(),
    )
    with self._count_input_copies() as counts:
      out = jax.block_until_ready(call(s, x, w))

    expected = np.concatenate([x[b * 8:(b + 1) * 8] + b for b in s])
    np.testing.assert_array_equal(out, expected)
    self.assertEqual(counts['callbacks'], 3)
    self.assertEqual(counts['blocks'], 3)

  def test_step_copy_no_callback_for_inputs_in_hbm(self):
    def kernel(x_hbm_ref, o_ref):
      pltpu.sync_copy(x_hbm_ref.at[pl.ds(pl.program_id(0) * 8, 8)], o_ref)

    x = np.arange(2 * 8 * 128, dtype=np.float32).reshape(2 * 8, 128)
    call = pl.pallas_call(
        kernel,
        grid=(2,),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        interpret=pltpu.InterpretParams(),
    )
    with self._count_input_copies() as counts:
      out = jax.block_until_ready(call(x))

    np.testing.assert_array_equal(out, x)
    self.assertEqual(counts['callbacks'], 0)
    self.assertEqual(counts['blocks'], 0)

  def test_step_copy_two_cores(self):
    # Two cores, one point of the parallel dimension each (in an order the
    # interpreter randomizes), 2 steps of the arbitrary dimension each. x's
    # block index is (i, 0), y's (0, 0): each core copies both at its first
    # step and nothing at its second.
    def kernel(x_ref, y_ref, o_ref):
      o_ref[...] = x_ref[...] - y_ref[...] + pl.program_id(1).astype(
          jnp.float32
      )

    x = np.arange(2 * 8 * 128, dtype=np.float32).reshape(2 * 8, 128)
    y = np.full((8, 128), 1.0, np.float32)
    call = pl.pallas_call(
        kernel,
        grid=(2, 2),
        in_specs=[
            pl.BlockSpec((8, 128), lambda i, j: (i, 0)),
            pl.BlockSpec((8, 128), lambda i, j: (0, 0)),
        ],
        out_specs=pl.BlockSpec((8, 128), lambda i, j: (i, j)),
        out_shape=jax.ShapeDtypeStruct((2 * 8, 2 * 128), np.float32),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=('parallel', 'arbitrary')
        ),
        interpret=test_util.interpret_params(num_cores_or_threads=2),
    )
    with self._count_input_copies() as counts:
      out = jax.block_until_ready(call(x, y))

    np.testing.assert_array_equal(
        out, np.concatenate([x - 1.0, x], axis=1)
    )
    self.assertEqual(counts['callbacks'], 2)
    self.assertEqual(counts['blocks'], 4)

  def test_step_copy_partial_block_reads_uninitialized_memory(self):
    # x has 12 rows: block 1 (rows 8 to 16) reads rows 12 to 16 out of
    # bounds, which are NaN with out_of_bounds_reads='uninitialized'.
    def kernel(x_ref, y_ref, o_ref):
      o_ref[...] = x_ref[...] * 2.0 + y_ref[...]

    x = np.arange(12 * 128, dtype=np.float32).reshape(12, 128)
    y = np.ones((16, 128), np.float32)
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    out = pl.pallas_call(
        kernel,
        grid=(2,),
        in_specs=[spec, spec],
        out_specs=spec,
        out_shape=jax.ShapeDtypeStruct((16, 128), np.float32),
        interpret=pltpu.InterpretParams(
            out_of_bounds_reads='uninitialized', uninitialized_memory='nan'
        ),
    )(x, y)

    np.testing.assert_array_equal(out[:12], x * 2.0 + 1.0)
    self.assertTrue(np.isnan(np.asarray(out[12:])).all())

  def test_step_copy_out_of_bounds_second_input_raises(self):
    # x's blocks are in bounds; y's block 2 at step 1 (rows 16 to 24 of a
    # 16-row input) is not, and the error names y.
    def kernel(x_ref, y_ref, o_ref):
      o_ref[...] = x_ref[...] + y_ref[...]

    x = np.ones((16, 128), np.float32)
    call = pl.pallas_call(
        kernel,
        grid=(2,),
        in_specs=[
            pl.BlockSpec((8, 128), lambda i: (i, 0)),
            pl.BlockSpec((8, 128), lambda i: (2 * i, 0)),
        ],
        out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        interpret=pltpu.InterpretParams(),
    )
    with self.assertRaisesRegex(
        Exception,
        r'Out-of-bounds block index \(2, 0\) for input "y_ref" in iteration'
        r' \(1,\)',
    ):
      jax.block_until_ready(call(x, x))
    test_util.reset_after_failure()

  @parameterized.named_parameters(
      # The output is the second input (aliased): core 1 copies input block 0
      # in while core 0 copies its output block 0 out.
      ('read_write', lambda i: (0, 0), lambda i: (i, 0), True),
      # Each core copies its own blocks: no race.
      ('none', lambda i: (i, 0), lambda i: (i, 0), False),
  )
  def test_step_copy_race_between_cores(
      self, in_index_map, out_index_map, expect_race
  ):
    def kernel(x_ref, y_ref, o_ref):
      o_ref[...] = x_ref[...] + y_ref[...]

    x = np.ones((16, 128), np.float32)
    y = np.arange(16 * 128, dtype=np.float32).reshape(16, 128)
    out = pl.pallas_call(
        kernel,
        grid=(2,),
        in_specs=[
            pl.BlockSpec((8, 128), lambda i: (i, 0)),
            pl.BlockSpec((8, 128), in_index_map),
        ],
        out_specs=pl.BlockSpec((8, 128), out_index_map),
        out_shape=jax.ShapeDtypeStruct(y.shape, y.dtype),
        input_output_aliases={1: 0},
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=('parallel',)
        ),
        interpret=test_util.interpret_params(
            num_cores_or_threads=2, detect_races=True, on_race='warn'
        ),
    )(x, y)

    self.assertEqual(mosaic_interpret.races.races_found, expect_race)
    if not expect_race:
      np.testing.assert_array_equal(out, x + y)


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
