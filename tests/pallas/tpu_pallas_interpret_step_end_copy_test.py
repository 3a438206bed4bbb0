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

"""Tests of the block copies between grid steps, in TPU interpret mode.

At the end of each step of the grid, one io_callback copies the output
blocks that change at the next step (all of them at a core's last step) to
HBM, checks that no output block is revisited, and then copies the input
blocks whose block index changes at the next step into the kernel's
buffers; the input blocks of a core's first step are copied by a callback of
their own. These tests check the results against numpy for kernels whose
next step reads what the previous one wrote, that write an output block
only at some of its steps and that split the grid between cores, that races
between those copies are still detected, and count the callbacks.

To work around https://github.com/jax-ml/jax/issues/25671 , this file
contains only tests that do not use shard_map.
"""

import contextlib
import functools
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
class InterpretStepEndCopyTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if not hasattr(mosaic_interpret, '_copy_output_and_input_blocks'):
      self.skipTest(
          'jax 0.10.x and older: their series have no step-end copy patch'
      )
    # Older jax releases: end.

  @contextlib.contextmanager
  def _count_block_copy_callbacks(self):
    """Counts the io_callbacks that copy blocks, by the function they run.

    Wraps the function that runs every callback of the interpreter. Yields a
    dict from the name of each function that copies pallas_call blocks (the
    interpreter's `_copy_input_blocks`,
    `_copy_output_blocks_and_check_for_revisiting` and
    `_copy_output_and_input_blocks`, or any function given an `input_name`
    or `output_name`: a copy of one block in a callback of its own) to the
    number of callbacks that ran it.

    Yields:
      The counts.
    """
    block_copy_callbacks = (
        '_copy_input_blocks',
        '_copy_output_blocks_and_check_for_revisiting',
        '_copy_output_and_input_blocks',
    )
    counts = {}
    lock = threading.Lock()
    module, name = mosaic_interpret.interpret_utils, 'interpret_callback_impl'
    if not hasattr(module, name):  # Before the callbacks got NumPy arrays.
      module, name = jax._src.callback, 'io_callback_impl'
    saved_impl = getattr(module, name)

    def impl(*args, callback, **kwargs):
      fn = getattr(callback, 'callback_func', callback)
      keywords = set()
      while isinstance(fn, functools.partial):
        keywords |= set(fn.keywords)
        fn = fn.func
      name = getattr(fn, '__name__', '')
      if name in block_copy_callbacks or keywords & {
          'input_name', 'output_name'
      }:
        with lock:
          counts[name] = counts.get(name, 0) + 1
      return saved_impl(*args, callback=callback, **kwargs)

    setattr(module, name, impl)
    try:
      yield counts
    finally:
      setattr(module, name, saved_impl)

  @parameterized.parameters(False, True)
  def test_step_end_copy_one_callback_per_step(self, detect_races):
    # Two inputs and an output whose blocks change at every step: the first
    # step's inputs are copied by one callback, then one callback per step
    # copies the step's output block and the next step's input blocks.
    def kernel(x_ref, y_ref, o_ref):
      o_ref[...] = x_ref[...] * y_ref[...] + 1.0

    x = np.arange(4 * 8 * 128, dtype=np.float32).reshape(4 * 8, 128)
    # Small integers, so that every result is exact in float32.
    y = (np.arange(4 * 8 * 128) % 7 - 3).astype(np.float32).reshape(
        4 * 8, 128
    )
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    call = pl.pallas_call(
        kernel,
        grid=(4,),
        in_specs=[spec, spec],
        out_specs=spec,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        interpret=test_util.interpret_params(
            detect_races=detect_races, on_race='warn'
        ),
    )
    with self._count_block_copy_callbacks() as counts:
      out = jax.block_until_ready(call(x, y))

    np.testing.assert_array_equal(out, x * y + 1.0)
    self.assertEqual(
        counts,
        {'_copy_input_blocks': 1, '_copy_output_and_input_blocks': 4},
    )
    if detect_races:
      self.assertFalse(mosaic_interpret.races.races_found)

  def test_step_end_copy_outputs_only_without_blocked_inputs(self):
    # The input is in HBM: each step's callback copies the output block and
    # checks for revisiting only.
    def kernel(x_hbm_ref, o_ref):
      pltpu.sync_copy(x_hbm_ref.at[pl.ds(pl.program_id(0) * 8, 8)], o_ref)

    x = np.arange(3 * 8 * 128, dtype=np.float32).reshape(3 * 8, 128)
    call = pl.pallas_call(
        kernel,
        grid=(3,),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        interpret=pltpu.InterpretParams(),
    )
    with self._count_block_copy_callbacks() as counts:
      out = jax.block_until_ready(call(x))

    np.testing.assert_array_equal(out, x)
    self.assertEqual(
        counts, {'_copy_output_blocks_and_check_for_revisiting': 3}
    )

  @parameterized.parameters(False, True)
  def test_step_end_copy_next_step_reads_previous_output(self, detect_races):
    # The output is the input (aliased). Step i reads block i and writes
    # block i + 1, which step i + 1 reads: the output block must reach HBM
    # before the next step's input block is copied from there.
    def kernel(x_ref, o_ref):
      o_ref[...] = x_ref[...] + 1.0

    x = np.zeros((4 * 8, 128), np.float32)
    x[:8] = np.arange(8 * 128, dtype=np.float32).reshape(8, 128)
    out = pl.pallas_call(
        kernel,
        grid=(3,),
        in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i: (i + 1, 0)),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        input_output_aliases={0: 0},
        interpret=test_util.interpret_params(
            detect_races=detect_races, on_race='warn'
        ),
    )(x)

    expected = np.concatenate([x[:8] + k for k in range(4)])
    np.testing.assert_array_equal(out, expected)
    if detect_races:
      self.assertFalse(mosaic_interpret.races.races_found)

  def test_step_end_copy_output_written_at_some_steps(self):
    # A blocked matmul whose output block is written only at the last step
    # of the reduction, and copied out only when its block changes.
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
    with self._count_block_copy_callbacks() as counts:
      out = jax.block_until_ready(call(x, y))

    np.testing.assert_array_equal(out, x @ y)
    self.assertEqual(
        counts,
        {'_copy_input_blocks': 1, '_copy_output_and_input_blocks': 12},
    )

  def test_step_end_copy_revisited_output_raises(self):
    # The output block goes 0, 1, 0: revisiting is still an error.
    def kernel(x_ref, o_ref):
      o_ref[...] = x_ref[...]

    x = np.ones((3 * 8, 128), np.float32)
    call = pl.pallas_call(
        kernel,
        grid=(3,),
        in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i: (i % 2, 0)),
        out_shape=jax.ShapeDtypeStruct((2 * 8, 128), np.float32),
        interpret=pltpu.InterpretParams(),
    )
    with self.assertRaisesRegex(Exception, r'Revisited block'):
      jax.block_until_ready(call(x))
    test_util.reset_after_failure()

  def test_step_end_copy_uninitialized_and_out_of_bounds_reads(self):
    # x has 20 rows: its block 2, copied at the end of step 1, reads rows 20
    # to 24 out of bounds, which are NaN with
    # out_of_bounds_reads='uninitialized'.
    def kernel(x_ref, o_ref):
      o_ref[...] = x_ref[...] - 1.0

    x = np.arange(20 * 128, dtype=np.float32).reshape(20, 128)
    out = pl.pallas_call(
        kernel,
        grid=(3,),
        in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct((24, 128), np.float32),
        interpret=pltpu.InterpretParams(
            out_of_bounds_reads='uninitialized', uninitialized_memory='nan'
        ),
    )(x)

    np.testing.assert_array_equal(out[:20], x - 1.0)
    self.assertTrue(np.isnan(np.asarray(out[20:])).all())

  @parameterized.parameters((2, 3), (2, 1), (3, 4))
  def test_step_end_copy_cores_split_the_grid(self, num_cores, size):
    # `size` points of a parallel dimension split between `num_cores` cores
    # (a core may have none), two steps of an arbitrary one each.
    def kernel(x_ref, o_ref):
      o_ref[...] = x_ref[...] * 2.0 + pl.program_id(1).astype(jnp.float32)

    x = np.arange(size * 8 * 128, dtype=np.float32).reshape(size * 8, 128)
    out = pl.pallas_call(
        kernel,
        grid=(size, 2),
        in_specs=[pl.BlockSpec((8, 128), lambda i, j: (i, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i, j: (i, j)),
        out_shape=jax.ShapeDtypeStruct((size * 8, 2 * 128), np.float32),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=('parallel', 'arbitrary')
        ),
        interpret=test_util.interpret_params(
            num_cores_or_threads=num_cores
        ),
    )(x)

    np.testing.assert_array_equal(
        out, np.concatenate([x * 2.0, x * 2.0 + 1.0], axis=1)
    )

  @parameterized.named_parameters(
      # The core of grid point i reads y's block i, then the other core's
      # block at the end of its first step, and writes the aliased block i
      # when it ends: each core's second read and the other core's write
      # are not ordered.
      ('aliased', {1: 0}, True),
      ('not_aliased', {}, False),
  )
  def test_step_end_copy_race_between_cores(self, aliases, expect_race):
    def kernel(x_ref, y_ref, o_ref):
      o_ref[...] = x_ref[...] + y_ref[...]

    x = np.ones((16, 128), np.float32)
    y = np.arange(16 * 128, dtype=np.float32).reshape(16, 128)
    out = pl.pallas_call(
        kernel,
        grid=(2, 2),
        in_specs=[
            pl.BlockSpec((8, 128), lambda i, j: (i, 0)),
            pl.BlockSpec((8, 128), lambda i, j: ((i + j) % 2, 0)),
        ],
        out_specs=pl.BlockSpec((8, 128), lambda i, j: (i, 0)),
        out_shape=jax.ShapeDtypeStruct(y.shape, y.dtype),
        input_output_aliases=aliases,
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=('parallel', 'arbitrary')
        ),
        interpret=test_util.interpret_params(
            num_cores_or_threads=2, detect_races=True, on_race='warn'
        ),
    )(x, y)

    self.assertEqual(mosaic_interpret.races.races_found, expect_race)
    if not expect_race:
      np.testing.assert_array_equal(
          out, x + np.concatenate([y[8:], y[:8]])
      )


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
