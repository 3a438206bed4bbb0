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

"""Tests of the arguments of the interpreter's callbacks, in TPU interpret mode.

The interpreter's callbacks (loads, stores, DMAs, semaphores, block copies)
get the NumPy arrays that XLA passes to the host callback: none of their
arguments is put on a device as a `jax.Array`, which cost more than the
callbacks' own work, and a kernel's input becomes its buffer in the
interpreter's memory without a second copy.

To work around https://github.com/jax-ml/jax/issues/25671 , this file
contains only tests that do not use shard_map.
"""

import contextlib
import threading
import tracemalloc

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
class InterpretCallbackArgsTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    utils = getattr(mosaic_interpret, 'interpret_utils', None)
    if not hasattr(utils, 'io_callback'):
      self.skipTest(
          'jax 0.10.x and older: their series have no NumPy callback patch'
      )
    # Older jax releases: end.

  @contextlib.contextmanager
  def _record_callbacks(self):
    """Records the callbacks that a call runs, and their arguments' types.

    Wraps jax's `io_callback_impl`, which runs every `io_callback` (it puts the
    arguments on a CPU device as `jax.Array`s first), and
    `interpret_utils.interpret_callback_impl`, which runs the interpreter's
    other callbacks.

    Yields:
      A dict whose entries, after the block, are `io_callbacks`: the number of
      `io_callback`s, `callbacks`: the number of the interpreter's other
      callbacks, and `arg_types`: the types of those callbacks' arguments.
    """
    record = {'io_callbacks': 0, 'callbacks': 0, 'arg_types': set()}
    lock = threading.Lock()
    interpret_utils = mosaic_interpret.interpret_utils
    saved_io_callback_impl = jax._src.callback.io_callback_impl
    saved_interpret_callback_impl = interpret_utils.interpret_callback_impl

    def io_callback_impl(*args, **kwargs):
      with lock:
        record['io_callbacks'] += 1
      return saved_io_callback_impl(*args, **kwargs)

    def interpret_callback_impl(*args, **kwargs):
      with lock:
        record['callbacks'] += 1
        record['arg_types'].update(type(arg) for arg in args)
      return saved_interpret_callback_impl(*args, **kwargs)

    jax._src.callback.io_callback_impl = io_callback_impl
    interpret_utils.interpret_callback_impl = interpret_callback_impl
    try:
      yield record
    finally:
      jax._src.callback.io_callback_impl = saved_io_callback_impl
      interpret_utils.interpret_callback_impl = saved_interpret_callback_impl

  @parameterized.parameters(False, True)
  def test_callbacks_get_numpy_arrays(self, detect_races):
    # Each step copies its blocks and loads and stores in the kernel body, all
    # in callbacks; none of them is an io_callback.
    def kernel(x_ref, o_ref, acc_ref):
      acc_ref[...] = x_ref[...] * 2.0
      for r in range(0, 8, 2):
        o_ref[r : r + 2, :] = acc_ref[r : r + 2, :] + 1.0

    x = np.arange(4 * 8 * 128, dtype=np.float32).reshape(4 * 8, 128)
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    call = pl.pallas_call(
        kernel,
        grid=(4,),
        in_specs=[spec],
        out_specs=spec,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32)],
        interpret=test_util.interpret_params(
            detect_races=detect_races, on_race='warn'
        ),
    )
    x_device = jnp.asarray(x)
    with self._record_callbacks() as record:
      out = jax.block_until_ready(call(x_device))

    np.testing.assert_array_equal(out, x * 2.0 + 1.0)
    self.assertEqual(record['io_callbacks'], 0)
    # At least a load, a store and a block copy per step.
    self.assertGreaterEqual(record['callbacks'], 3 * 4)
    self.assertEqual(record['arg_types'], {np.ndarray})
    if detect_races:
      self.assertFalse(mosaic_interpret.races.races_found)

  def test_callbacks_of_two_cores_get_numpy_arrays(self):
    # Two cores on threads exchange their rows by DMA and signal each other's
    # semaphores. The callback that runs the cores on threads is the one
    # io_callback of the call.
    x = np.arange(2 * 8 * 128, dtype=np.float32).reshape(2 * 8, 128)

    @test_util.kernel(
        out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
        mesh=test_util.tensorcore_mesh(axis_name='core', num_cores=2),
        scratch_types=[
            pltpu.VMEM((8, 128), jnp.float32),
            pltpu.SemaphoreType.REGULAR,
        ],
        interpret=test_util.interpret_params(),
    )
    def call(x_hbm, o_hbm, buf, sem):
      core = jax.lax.axis_index('core')
      other = 1 - core
      pltpu.sync_copy(x_hbm.at[pl.ds(core * 8, 8)], buf)
      buf[...] = buf[...] + 1.0
      pltpu.sync_copy(buf, o_hbm.at[pl.ds(other * 8, 8)])
      pl.semaphore_signal(sem, 1, core_index=other)
      pl.semaphore_wait(sem, 1)

    x_device = jnp.asarray(x)
    with self._record_callbacks() as record:
      out = jax.block_until_ready(call(x_device))

    expected = np.concatenate([x[8:], x[:8]]) + 1.0
    np.testing.assert_array_equal(out, expected)
    self.assertEqual(record['io_callbacks'], 1)
    # Per core: two DMAs (start and wait each), a load, a store, a signal and
    # a wait.
    self.assertGreaterEqual(record['callbacks'], 2 * 8)
    self.assertEqual(record['arg_types'], {np.ndarray})

  def test_an_input_is_copied_once(self):
    # The kernel overwrites rows 0-7 of its input in HBM by DMA, then copies
    # rows 0-15 to its output. The caller's array keeps its values, and the
    # NumPy memory that the call holds at once is the input's buffer and the
    # output, not also a second copy of the input (the array that XLA made of
    # the operand for the callback is the buffer).
    x = np.arange(1024 * 1024, dtype=np.float32).reshape(1024, 1024)

    def kernel(x_hbm, o_hbm, buf, sem):
      buf[...] = jnp.full((8, 1024), -1.0, jnp.float32)
      pltpu.async_copy(buf, x_hbm.at[pl.ds(0, 8)], sem).wait()
      pltpu.async_copy(x_hbm.at[pl.ds(0, 16)], o_hbm, sem).wait()

    call = pl.pallas_call(
        kernel,
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        out_shape=jax.ShapeDtypeStruct((16, 1024), jnp.float32),
        scratch_shapes=[
            pltpu.VMEM((8, 1024), jnp.float32),
            pltpu.SemaphoreType.DMA,
        ],
        interpret=test_util.interpret_params(),
    )
    x_device = jnp.asarray(x)
    jax.block_until_ready(call(x_device))  # Compiles.
    tracemalloc.start()
    try:
      out = jax.block_until_ready(call(x_device))
      _, peak = tracemalloc.get_traced_memory()
    finally:
      tracemalloc.stop()

    np.testing.assert_array_equal(out[:8], -1.0)
    np.testing.assert_array_equal(out[8:], x[8:16])
    np.testing.assert_array_equal(x_device, x)
    self.assertLess(peak, 1.5 * x.nbytes)

  def test_failed_callback_logs_the_kernels_source_line(self):
    # As `io_callback` does, a callback that raises is logged with its
    # traceback, which names the kernel's line: XLA's error keeps only the
    # exception's message.
    def kernel(x_ref, o_ref):
      # Rows 12 to 19 of 16 in the second step: out of bounds.
      o_ref[...] = x_ref[pl.ds(pl.program_id(0) * 12, 8), :]

    line = kernel.__code__.co_firstlineno + 2
    call = pl.pallas_call(
        kernel,
        grid=(2,),
        in_specs=[pl.BlockSpec((16, 128), lambda i: (0, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i: (0, 0)),
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        interpret=test_util.interpret_params(),
    )
    with (
        self.assertLogs('jax._src.callback', level='ERROR') as logs,
        self.assertRaisesRegex(Exception, 'Out-of-bounds read'),
    ):
      jax.block_until_ready(call(jnp.ones((16, 128), jnp.float32)))
    test_util.reset_after_failure()
    self.assertIn(
        f'{__file__}", line {line}, in kernel', '\n'.join(logs.output)
    )


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
