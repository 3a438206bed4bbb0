"""Which kernels a TPU rejects for the VMEM their blocks and scratch need.

Issue 45, item 3: Mosaic rejects a kernel whose VMEM windows (the blocks of
its inputs and outputs, times their buffering) and VMEM scratch do not fit
the kernel's VMEM limit, with a `JaxRuntimeError` that names each window;
TPU interpret mode ran such kernels. This script compiles and runs kernels
around the limits and records, as JSON, what each gives on this backend:
the error class and message, or "ok". Cases:

- upstream's `test_vmem_oom_error_message_basics` (tpu_pallas_test.py at
  jax-v0.10.2: blocks of a (2, 2) grid that fill the VMEM single- or
  double-buffered), its dynamic-grid case with scalar prefetch and scratch,
  and `test_vmem_limit`'s (128, 128) copy under `vmem_limit_bytes` of 256,
  2**17 + 4096 and 2**18;
- blocks of 48 MiB under a `vmem_limit_bytes` of 120 MiB, with a grid of two
  steps: one window each fits, two (double buffering) do not; the same with
  the block the whole array (a single window), and with `pl.Buffered(1)`;
- windows of 12 MiB and 32 MiB (double-buffered) without `vmem_limit_bytes`:
  whether the default limit is the VMEM or a smaller scoped limit;
- windows of 15.75, 16 and 16.25 MiB without a limit, 16 MiB under a limit of
  16 MiB, the (128, 128) copy under a limit of exactly 2**17, and a 20 MiB
  VMEM scratch without a limit: where the default scoped limit lies, whether
  the limit is inclusive, whether Mosaic's internal scratch counts, whether
  scratch counts against the default limit;
- VMEM scratch of 20 MiB under a limit of 16 MiB, of 120 and 128 MiB, two of
  80 MiB, and 100 MiB with 48 MiB of windows under a limit of 120 MiB: how
  scratch counts against the limit and the VMEM;
- upstream's `test_automatic_single_buffering` (10 MiB int8 output windows,
  compiled only): which index maps over a grid with a dimension of size one
  give one window, and `pl.Buffered(3)`.

    python3 hardware/probes/vmem_probe.py --out DIR   # writes DIR/vmem_probe.json

`--cases` runs some of them and `--name` names the file; LIBTPU_INIT_ARGS, as
the process got it, is recorded (`--xla_tpu_scoped_vmem_limit_kib` sets the
default scoped limit).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
import jax.numpy as jnp
import numpy as np
try:  # Imported as probes.<name> by tests/hardware_parity_test.py.
  from . import probe_report
except ImportError:  # Run as a script.
  import probe_report

MIB = 2**20


def _copy(x_ref, o_ref, *scratch):
  del scratch
  o_ref[...] = x_ref[...]


def _blocked_copy(shape, block, grid, index_map, *, pipeline_mode=None,
                  vmem_limit_bytes=None):
  """A float32 copy of `shape` by `block`s over `grid`."""
  spec = pl.BlockSpec(block, index_map, pipeline_mode=pipeline_mode)
  x = jnp.arange(np.prod(shape), dtype=jnp.float32).reshape(shape)
  return pl.pallas_call(
      _copy,
      out_shape=jax.ShapeDtypeStruct(shape, jnp.float32),
      grid=grid,
      in_specs=[spec],
      out_specs=spec,
      compiler_params=pltpu.CompilerParams(vmem_limit_bytes=vmem_limit_bytes),
  )(x)


def _basics(buffer_count):
  block = (4096 // buffer_count, 8192)
  return _blocked_copy((2 * block[0], 2 * block[1]), block, (2, 2),
                       lambda i, j: (i, j),
                       pipeline_mode=pl.Buffered(buffer_count))


def _vmem_limit(limit):
  x = jnp.arange(128 * 128, dtype=jnp.float32).reshape(128, 128)
  return pl.pallas_call(
      _copy, out_shape=x,
      compiler_params=pltpu.CompilerParams(vmem_limit_bytes=limit))(x)


def _dynamic_grid_scalar_prefetch_and_scratch():
  x_shape = (4096, 8192)

  def body(s_ref, x_ref, o_ref, scratch_ref):
    del s_ref, scratch_ref
    o_ref[...] = x_ref[...]

  @jax.jit
  def run(num_grid, s, x):
    return pl.pallas_call(
        body,
        out_shape=jax.ShapeDtypeStruct(x_shape, jnp.float32),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, grid=(num_grid,),
            in_specs=[pl.BlockSpec()], out_specs=pl.BlockSpec(),
            scratch_shapes=[pltpu.VMEM((x_shape[0] // 4, 8192), jnp.float32)]),
    )(s, x)

  x = jnp.zeros(x_shape, jnp.float32)
  return run(4, jnp.array([5.0], jnp.float32), x)


def _scratch(sizes, *, rows=8, vmem_limit_bytes=None, used=True):
  """A (rows, 2048) float32 copy with VMEM scratch buffers of `sizes` bytes."""
  def body(x_ref, o_ref, *scratch):
    # Each buffer is written and read (unless `used` is False), so that no
    # compiler can drop it as unused.
    o_ref[...] = x_ref[...]
    for s in scratch if used else ():
      s[pl.ds(0, 8), :] = x_ref[pl.ds(0, 8), pl.ds(0, 1024)]
      o_ref[pl.ds(0, 8), pl.ds(0, 1024)] += s[pl.ds(0, 8), :]
  x = jnp.zeros((rows, 2048), jnp.float32)
  return pl.pallas_call(
      body, out_shape=x,
      scratch_shapes=[pltpu.VMEM((n // (4 * 1024), 1024), jnp.float32)
                      for n in sizes],
      compiler_params=pltpu.CompilerParams(vmem_limit_bytes=vmem_limit_bytes),
  )(x)


def _single_buffering(grid, index_map, *, pipeline_mode=None,
                      num_scalar_prefetch=0):
  """Compiles upstream's test_automatic_single_buffering kernel.

  A kernel that does nothing, whose int8 output of 100 MiB has blocks of
  10 MiB; only compiled (nothing is written).
  """
  out_shape = jax.ShapeDtypeStruct((100 * MIB,), jnp.int8)
  spec = pl.BlockSpec((10 * MIB,), index_map, pipeline_mode=pipeline_mode)
  body = lambda *_: None
  if num_scalar_prefetch:
    call = pl.pallas_call(
        body, out_shape=out_shape,
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=num_scalar_prefetch, grid=grid,
            out_specs=spec))
  else:
    call = pl.pallas_call(body, out_shape=out_shape, grid=grid,
                          out_specs=spec)
  scalars = [jnp.array([0], jnp.int32)] * num_scalar_prefetch
  jax.jit(call).lower(*scalars).compile()


def _windows(rows, vmem_limit_bytes=None):
  """Double-buffered (rows, 2048) float32 windows: rows * 32 KiB in all."""
  return _blocked_copy((4 * rows, 2048), (rows, 2048), (4,),
                       lambda i: (i, 0), vmem_limit_bytes=vmem_limit_bytes)


# 48 MiB float32 blocks: (1536, 8192).
_ROWS = 48 * MIB // (8192 * 4)

CASES = {
    'basics_buffered_1': lambda: _basics(1),
    'basics_buffered_2': lambda: _basics(2),
    'dynamic_grid_scalar_prefetch_and_scratch':
        _dynamic_grid_scalar_prefetch_and_scratch,
    'vmem_limit_256': lambda: _vmem_limit(256),
    'vmem_limit_2_17_plus_4096': lambda: _vmem_limit(2**17 + 4096),
    'vmem_limit_2_18': lambda: _vmem_limit(2**18),
    'blocks_48mib_grid_2_limit_120mib': lambda: _blocked_copy(
        (2 * _ROWS, 8192), (_ROWS, 8192), (2,), lambda i: (i, 0),
        vmem_limit_bytes=120 * MIB),
    'blocks_48mib_grid_2_buffered_1_limit_120mib': lambda: _blocked_copy(
        (2 * _ROWS, 8192), (_ROWS, 8192), (2,), lambda i: (i, 0),
        pipeline_mode=pl.Buffered(1), vmem_limit_bytes=120 * MIB),
    'whole_array_48mib_grid_2_limit_120mib': lambda: _blocked_copy(
        (_ROWS, 8192), (_ROWS, 8192), (2,), lambda i: (0, 0),
        vmem_limit_bytes=120 * MIB),
    'windows_12mib_no_limit': lambda: _blocked_copy(
        (4 * 384, 2048), (384, 2048), (4,), lambda i: (i, 0)),
    'windows_32mib_no_limit': lambda: _blocked_copy(
        (4 * 1024, 2048), (1024, 2048), (4,), lambda i: (i, 0)),
    'windows_15_75mib_no_limit': lambda: _windows(504),
    'windows_16mib_no_limit': lambda: _windows(512),
    'windows_16_25mib_no_limit': lambda: _windows(520),
    'windows_16mib_limit_16mib': lambda: _windows(512, 16 * MIB),
    'vmem_limit_2_17': lambda: _vmem_limit(2**17),
    'scratch_20mib_no_limit': lambda: _scratch([20 * MIB]),
    'unused_scratch_20mib_no_limit': lambda: _scratch([20 * MIB], used=False),
    'scratch_20mib_limit_16mib': lambda: _scratch([20 * MIB],
                                                  vmem_limit_bytes=16 * MIB),
    'scratch_120mib_no_limit': lambda: _scratch([120 * MIB]),
    'scratch_128mib_no_limit': lambda: _scratch([128 * MIB]),
    'scratch_2_times_80mib_no_limit': lambda: _scratch([80 * MIB] * 2),
    'scratch_100mib_windows_48mib_limit_120mib': lambda: _scratch(
        [100 * MIB], rows=3072, vmem_limit_bytes=120 * MIB),
    'single_buffering_grid_4': lambda: _single_buffering(
        (4,), lambda i: (0,)),
    'single_buffering_grid_4_1_index_j': lambda: _single_buffering(
        (4, 1), lambda i, j: (j,)),
    'single_buffering_grid_1_4_index_i': lambda: _single_buffering(
        (1, 4), lambda i, j: (i,)),
    'single_buffering_grid_4_1_index_j_plus_i': lambda: _single_buffering(
        (4, 1), lambda i, j: (j + i,)),
    'single_buffering_grid_4_1_index_j_plus_i_buffered_1': lambda: (
        _single_buffering((4, 1), lambda i, j: (j + i,),
                          pipeline_mode=pl.Buffered(1))),
    'single_buffering_scalar_prefetch_index_j_plus_i': lambda: (
        _single_buffering((4, 1), lambda i, j, *_: (j + i,),
                          num_scalar_prefetch=2)),
    'single_buffering_scalar_prefetch_index_j': lambda: (
        _single_buffering((4, 1), lambda i, j, *_: (j,),
                          num_scalar_prefetch=2)),
    'buffered_3': lambda: _blocked_copy(
        (64, 128), (8, 128), (8,), lambda i: (i, 0),
        pipeline_mode=pl.Buffered(3)),
}


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--out', default='.')
  parser.add_argument('--name', default='vmem_probe.json')
  parser.add_argument('--cases', default=','.join(CASES),
                      help='comma-separated names of the cases to run')
  args = parser.parse_args()
  device = jax.devices()[0]
  report = {'jax': jax.__version__, 'platform': device.platform,
            'device_kind': device.device_kind,
            'LIBTPU_INIT_ARGS': os.environ.get('LIBTPU_INIT_ARGS'),
            'cases': {}}
  for name in args.cases.split(','):
    case = CASES[name]
    try:
      jax.block_until_ready(case())
      result = 'ok'
    except Exception as e:  # pylint: disable=broad-except
      result = {'raised': type(e).__name__, 'message': str(e)}
    report['cases'][name] = result
    print(name, result if result == 'ok' else result['raised'], flush=True)
  probe_report.write(report, args.out, args.name)
  json.dump(report, sys.stdout, indent=1)


if __name__ == '__main__':
  main()
