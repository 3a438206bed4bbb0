"""What a TPU says of a kernel's requested internal scratch size.

Issue 45, item 3: upstream's `test_set_internal_scratch_size`
(tpu_pallas_test.py) expects Mosaic to reject
`CompilerParams(internal_scratch_in_bytes=512)` with "Requested internal
scratch size 512 needs to be at least ..."; TPU interpret mode ignored the
field before #52. This script compiles and runs a (128, 128) float32 copy, a
kernel with a (128, 128) float32 matmul and one with a grid of two steps
under requested sizes from 0 bytes to 1 MiB, and records, as JSON, what each
gives on this backend: the error class and message, or "ok".

    python3 hardware/probes/internal_scratch_probe.py --out DIR [--sizes ...]

`internal_scratch_probe_tpu_v5_lite.json` holds three such runs on a TPU v5e
(their commands are in it): Mosaic rounds the size up to a multiple of 512
bytes, rejects it below 36864 bytes with an INVALID_ARGUMENT error and above
the VMEM (128 MiB) with RESOURCE_EXHAUSTED, whatever the kernel.
"""

from __future__ import annotations

import argparse

import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
import jax.numpy as jnp
import numpy as np
try:  # Imported as probes.<name> by tests/hardware_parity_test.py.
  from . import probe_report
except ImportError:  # Run as a script.
  import probe_report

SIZES = (0, 512, 4096, 8192, 16384, 32768, 65536, 131072, 2**20)


def _copy(x_ref, o_ref):
  o_ref[...] = x_ref[...]


def _matmul(x_ref, o_ref):
  o_ref[...] = jnp.dot(x_ref[...], x_ref[...],
                       preferred_element_type=jnp.float32)


KERNELS = {
    'copy': (_copy, None),
    'matmul': (_matmul, None),
    'copy_grid_2': (_copy, 2),
}


def run(kernel_name, size):
  kernel, grid = KERNELS[kernel_name]
  shape = (128, 128)
  x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape) / 1024
  kwargs = {}
  if grid is not None:
    kwargs = dict(grid=(grid,), in_specs=[pl.BlockSpec((64, 128),
                                                        lambda i: (i, 0))],
                  out_specs=pl.BlockSpec((64, 128), lambda i: (i, 0)))
  f = pl.pallas_call(
      kernel, out_shape=jax.ShapeDtypeStruct(shape, jnp.float32),
      compiler_params=pltpu.CompilerParams(internal_scratch_in_bytes=size),
      **kwargs)
  try:
    out = np.asarray(jax.block_until_ready(f(x)))
  except Exception as e:  # pylint: disable=broad-except
    return {'error': type(e).__name__, 'message': str(e)[:2000]}
  expected = x @ x if kernel_name == 'matmul' else x
  return {'result': 'ok', 'max_abs_diff': float(np.max(np.abs(out - expected)))}


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--out', required=True)
  parser.add_argument('--sizes', default=None,
                      help='comma-separated sizes in bytes (default: SIZES)')
  parser.add_argument('--name', default='internal_scratch_probe.json')
  args = parser.parse_args()
  sizes = (tuple(int(s) for s in args.sizes.split(',')) if args.sizes
           else (None,) + SIZES)
  device = jax.devices()[0]
  data = {'jax': jax.__version__, 'jaxlib': jax.lib.__version__,
          'device_kind': device.device_kind, 'platform': device.platform,
          'cases': []}
  for name in KERNELS:
    for size in sizes:
      entry = {'kernel': name, 'internal_scratch_in_bytes': size}
      entry.update(run(name, size))
      print(name, size, entry.get('error', 'ok'),
            entry.get('message', '')[:200], flush=True)
      data['cases'].append(entry)
  probe_report.write(data, args.out, args.name)


if __name__ == '__main__':
  main()
