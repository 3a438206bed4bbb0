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

"""Tests of TPU interpret mode's check that a kernel fits in VMEM.

Mosaic rejects a kernel whose VMEM windows (a block of an input or output
per buffer) exceed the TPU's VMEM or the kernel's scoped VMEM limit
(`CompilerParams.vmem_limit_bytes`, else libtpu's
`--xla_tpu_scoped_vmem_limit_kib`, else the TPU's default), or one of whose
VMEM scratch operands exceeds the VMEM, or whose internal scratch size
(`CompilerParams.internal_scratch_in_bytes`) is below Mosaic's minimum or
exceeds the VMEM; so does interpret mode, with the `JaxRuntimeError` and the
message a TPU v5e gives.
"""

import os
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import jax
from jax._src import test_util as jtu
from jax._src.pallas.mosaic import lowering as mosaic_lowering
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
import jax.numpy as jnp
import numpy as np
import tpu_interpret_test_util as test_util


jax.config.parse_flags_with_absl()


# TODO(jburnim): Figure out how to safely run different instance of TPU
# interpret mode in parallel, and then remove this decorator.
@jtu.thread_unsafe_test_class()
class InterpretVmemLimitTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 11, 0):
      self.skipTest('jax 0.10.x and older: their series have no such patch')
    # Older jax releases: end.

  def _copy(self, shape, block_shape, grid, index_map, *, device_kind=None,
            pipeline_mode=None, vmem_limit_bytes=None, scratch_shapes=(),
            internal_scratch_in_bytes=None):
    """Copies a float32 array of `shape` by blocks, in TPU interpret mode."""
    def kernel(x_ref, o_ref, *scratch_refs):
      del scratch_refs
      o_ref[...] = x_ref[...]

    spec = pl.BlockSpec(block_shape, index_map, pipeline_mode=pipeline_mode)
    x = jnp.arange(np.prod(shape), dtype=jnp.float32).reshape(shape)
    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(shape, jnp.float32),
        grid=grid,
        in_specs=[spec],
        out_specs=spec,
        scratch_shapes=scratch_shapes,
        compiler_params=pltpu.CompilerParams(
            vmem_limit_bytes=vmem_limit_bytes,
            internal_scratch_in_bytes=internal_scratch_in_bytes),
        interpret=test_util.interpret_params(device_kind=device_kind),
    )(x)
    return x, out

  @parameterized.parameters(1, 2)
  def test_windows_that_exceed_the_vmem_raise(self, buffer_count):
    # A TPU v4 has 16 MiB of VMEM per core: the input and output windows take
    # 32 MiB, single- or double-buffered.
    block_shape = (2048 // buffer_count, 2048)
    with self.assertRaises(jax.errors.JaxRuntimeError) as cm:
      self._copy((4096, 2048), block_shape, (2,), lambda i: (i, 0),
                 device_kind='TPU v4',
                 pipeline_mode=pl.Buffered(buffer_count))
    message = str(cm.exception)
    self.assertIn(
        'RESOURCE_EXHAUSTED: Ran out of memory in memory space vmem. Used'
        ' 32.00M of 16.00M vmem. Exceeded vmem capacity by 16.00M.', message)
    buffering = ('This allocation is single buffered.' if buffer_count == 1
                 else 'This allocation has 2 buffering levels.')
    for window in ('input window allocation for operator input 0',
                   'output window allocation for operator output 0'):
      self.assertIn(
          f'{window}. The window shape is f32[{block_shape[0]},2048], while'
          f' the full shape is f32[4096,2048]. {buffering}', message)

  def test_single_buffered_windows_that_fit_run(self):
    # 8 MiB blocks: 16 MiB, all of the TPU v4's VMEM.
    x, out = self._copy((2048, 2048), (1024, 2048), (2,), lambda i: (i, 0),
                        device_kind='TPU v4', pipeline_mode=pl.Buffered(1))
    np.testing.assert_array_equal(out, x)

  @parameterized.named_parameters(
      # 4 KiB blocks of an input and an output: 8 KiB single-buffered, 16 KiB
      # double-buffered.
      ('grid_of_two_steps', (2,), lambda i: (i, 0), 16),
      ('grid_of_one_step', (1,), lambda i: (i, 0), None),
      ('index_map_that_ignores_the_grid', (2,), lambda i: (0, 0), None),
      ('index_map_of_a_grid_dimension_of_size_one', (2, 1),
       lambda i, j: (j, 0), None),
      ('index_map_of_both_grid_dimensions', (2, 1), lambda i, j: (i + j, 0),
       16),
  )
  def test_blocks_are_double_buffered_when_the_window_moves(
      self, grid, index_map, used_kib):
    run = lambda: self._copy((8 * grid[0], 128), (8, 128), grid, index_map,
                             vmem_limit_bytes=12 * 1024)
    if used_kib is None:
      x, out = run()
      np.testing.assert_array_equal(out[:8], x[:8])
      return
    with self.assertRaisesRegex(
        jax.errors.JaxRuntimeError,
        '(?s)E1001: CompileTimeScopedVmemOom:.*Scoped allocation with size'
        f' {used_kib}.0K and limit 12.0K exceeded scoped vmem limit by'
        f' {used_kib - 12}.0K'):
      run()

  def test_vmem_limit(self):
    # As upstream's tpu_pallas_test.py's test_vmem_limit, with the message of
    # a TPU v5e.
    with self.assertRaisesRegex(
        jax.errors.JaxRuntimeError,
        'Scoped allocation with size 128.0K and limit 256B exceeded scoped'
        ' vmem limit by 127.8K'):
      self._copy((128, 128), (128, 128), (), lambda: (0, 0),
                 vmem_limit_bytes=256)
    x, out = self._copy((128, 128), (128, 128), (), lambda: (0, 0),
                        vmem_limit_bytes=2**18)
    np.testing.assert_array_equal(out, x)

  def test_buffer_counts_other_than_one_and_two_raise(self):
    with self.assertRaisesRegex(
        mosaic_lowering.LoweringException,
        'Only single \\(1\\) and double \\(2\\) buffering are supported.'
        ' Got 3.'):
      self._copy((64, 128), (8, 128), (8,), lambda i: (i, 0),
                 pipeline_mode=pl.Buffered(3))

  @parameterized.parameters(('TPU v5 lite', 16), ('TPU v6 lite', 32))
  def test_default_scoped_vmem_limit(self, device_kind, limit_mib):
    # Double-buffered windows of 256 KiB more than the TPU's default scoped
    # VMEM limit.
    rows = limit_mib * 32 + 8
    with mock.patch.dict(os.environ):
      os.environ.pop('LIBTPU_INIT_ARGS', None)
      with self.assertRaisesRegex(
          jax.errors.JaxRuntimeError,
          f'size {limit_mib}.25M and limit {limit_mib}.00M exceeded scoped'
          ' vmem limit by 256.0K'):
        self._copy((4 * rows, 2048), (rows, 2048), (4,), lambda i: (i, 0),
                   device_kind=device_kind)

  def test_scoped_vmem_limit_flag(self):
    # libtpu's flag sets the limit of kernels without vmem_limit_bytes: 16
    # KiB of windows (double-buffered 4 KiB blocks).
    run = lambda **kw: self._copy((16, 128), (8, 128), (2,), lambda i: (i, 0),
                                  **kw)
    flags = '--xla_tpu_scoped_vmem_limit_kib=12 --xla_foo=1'
    with mock.patch.dict(os.environ, {'LIBTPU_INIT_ARGS': flags}):
      with self.assertRaisesRegex(
          jax.errors.JaxRuntimeError,
          '(?s)size 16.0K and limit 12.0K.*The scoped VMEM limit is'
          ' --xla_tpu_scoped_vmem_limit_kib=12 in LIBTPU_INIT_ARGS'):
        run()
      x, out = run(vmem_limit_bytes=16 * 1024)
      np.testing.assert_array_equal(out, x)
    with mock.patch.dict(
        os.environ, {'LIBTPU_INIT_ARGS': '--xla_tpu_scoped_vmem_limit_kib=16'}):
      x, out = run()
      np.testing.assert_array_equal(out, x)

  def test_vmem_scratch(self):
    # On a TPU v5e, each VMEM scratch operand must fit in the VMEM; they do
    # not count against the scoped limit, nor with the windows. A TPU v4 has
    # 16 MiB of VMEM per core.
    with self.assertRaisesRegex(
        jax.errors.JaxRuntimeError,
        r'RESOURCE_EXHAUSTED: Allocation \(size=16781312\) would exceed'
        r" memory \(size=16777216\) :: \[shape = 'f32\[4097,1024\]',"
        r" space=vmem, size = 0x1001000, scoped, tag = 'scratch operand'\]"):
      self._copy((8, 128), (8, 128), (1,), lambda i: (i, 0),
                 device_kind='TPU v4',
                 scratch_shapes=[pltpu.VMEM((4097, 1024), jnp.float32)])
    scratch_shapes = [pltpu.VMEM((2048, 1024), jnp.float32)] * 2 + [
        pltpu.SMEM((1024,), jnp.int32), pltpu.SemaphoreType.DMA]
    x, out = self._copy((8, 128), (8, 128), (1,), lambda i: (i, 0),
                        device_kind='TPU v4', vmem_limit_bytes=8192,
                        scratch_shapes=scratch_shapes)
    np.testing.assert_array_equal(out, x)

  def test_internal_scratch_size(self):
    # On a TPU v5e, Mosaic rounds the internal scratch size up to a multiple
    # of 512 bytes and rejects it below 36 KiB or above the VMEM (128 MiB).
    def run(size, device_kind='TPU v5 lite'):
      return self._copy((8, 128), (8, 128), (1,), lambda i: (i, 0),
                        device_kind=device_kind,
                        internal_scratch_in_bytes=size)

    for size in (512, 36352):
      with self.assertRaisesRegex(
          jax.errors.JaxRuntimeError,
          'INVALID_ARGUMENT: Mosaic failed to compile TPU kernel: Requested'
          f' internal scratch size {size} needs to be at least 36864 bytes.'):
        run(size)
    with self.assertRaisesRegex(
        jax.errors.JaxRuntimeError,
        r'RESOURCE_EXHAUSTED: Allocation \(size=134218240\) would exceed'
        r" memory \(size=134217728\) :: \[shape = 'u32\[262145,128\]',"
        r" space=vmem, size = 0x8000200, scoped, tag = 'internal scratch'\]"):
      run(2**27 + 512)
    for size, device_kind in ((36353, 'TPU v5 lite'), (2**27, 'TPU v5 lite'),
                              (512, 'TPU v6 lite'), (512, None)):
      x, out = run(size, device_kind)
      np.testing.assert_array_equal(out, x)


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
