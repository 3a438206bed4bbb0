"""In what order a TPU sums the products of a float32 matmul.

Issue 45: with `InterpretParams(matmul_precision="tpu")` (#48) summing the
bfloat16-rounded products with XLA:CPU's float32 dot, a kernel's float32
`jnp.dot` of one recorded (8, 128) x (128, 128) block equalled a TPU v5e's
bit for bit, but the matmul kernels of upstream's tests, which add each
block's product to an accumulator ref, agreed in only 50% to 62% of their
elements (`matmul_probe.py`). This script runs small kernels whose operands are
bfloat16 values held in float32 (so that rounding the operands changes
nothing) and records each output, so that CPU code can test which order of
float32 additions gives the chip's bits:

- `dot_k{128,256,512}`: `o = jnp.dot(x, y)` with x (8, K), y (K, 128);
- `acc_plus_dot_k{128,256}`: `o = a + jnp.dot(x, y)` with a (8, 128);
- `dot_plus_acc_k128`: `o = jnp.dot(x, y) + a`;
- `ref_accumulate_k128`: `o_ref[...] = a; o_ref[...] += jnp.dot(x, y)`;
- `dot_bf16_k256`: the same product with bfloat16 operands and
  `preferred_element_type=jnp.float32`.

The operands come from NumPy's `default_rng` with fixed seeds (`operands`),
so a reader computes them again; the outputs are stored as the base64 of
their float32 bytes.

    python3 hardware/probes/mxu_accumulation_probe.py --out DIR [--interpret]

`mxu_accumulation_probe_tpu_v5_lite.json` holds a run on a TPU v5e (jax
0.10.2), and the order it showed (docs/hardware.md, "The MXU's order of
additions"), which #48 now follows; `tests/hardware_parity_test.py` checks
interpret mode against it.
"""

from __future__ import annotations

import argparse
import base64

import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
import jax.numpy as jnp
import ml_dtypes
import numpy as np
try:  # Imported as probes.<name> by tests/hardware_parity_test.py.
  from . import probe_report
except ImportError:  # Run as a script.
  import probe_report

N = 128
CASES = ('dot_k128', 'dot_k256', 'dot_k512', 'acc_plus_dot_k128',
         'acc_plus_dot_k256', 'dot_plus_acc_k128', 'ref_accumulate_k128',
         'dot_bf16_k256')


def operands(k):
  """x (8, k), y (k, 128): bfloat16 values as float32; a (8, 128) float32."""
  rng = np.random.default_rng(k)
  def bf16(shape):
    return (rng.standard_normal(shape, dtype=np.float32)
            .astype(ml_dtypes.bfloat16).astype(np.float32))
  x, y = bf16((8, k)), bf16((k, N))
  a = (rng.standard_normal((8, N), dtype=np.float32) * 16).astype(np.float32)
  return x, y, a


def run(case, interpret=False):
  """Runs one case; returns its (8, 128) float32 output."""
  k = int(case.rsplit('_k', 1)[1])
  x, y, a = operands(k)

  def dot(x_ref, y_ref):
    if case.startswith('dot_bf16'):
      return jnp.dot(x_ref[...].astype(jnp.bfloat16),
                     y_ref[...].astype(jnp.bfloat16),
                     preferred_element_type=jnp.float32)
    return jnp.dot(x_ref[...], y_ref[...])

  def kernel(a_ref, x_ref, y_ref, o_ref):
    if case.startswith('acc_plus_dot'):
      o_ref[...] = a_ref[...] + dot(x_ref, y_ref)
    elif case.startswith('dot_plus_acc'):
      o_ref[...] = dot(x_ref, y_ref) + a_ref[...]
    elif case.startswith('ref_accumulate'):
      o_ref[...] = a_ref[...]
      o_ref[...] += dot(x_ref, y_ref)
    else:
      o_ref[...] = dot(x_ref, y_ref)

  out = pl.pallas_call(
      kernel, out_shape=jax.ShapeDtypeStruct((8, N), jnp.float32),
      interpret=pltpu.InterpretParams(matmul_precision='tpu')
      if interpret else False,
  )(a, x, y)
  return np.asarray(jax.block_until_ready(out))


def encode(a):
  return base64.b64encode(np.ascontiguousarray(a, np.float32).tobytes()
                          ).decode('ascii')


def decode(s):
  return np.frombuffer(base64.b64decode(s), np.float32).reshape(8, N)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--out', required=True)
  parser.add_argument('--name', default='mxu_accumulation_probe.json')
  parser.add_argument('--interpret', action='store_true',
                      help='run in TPU interpret mode (matmul_precision="tpu")')
  args = parser.parse_args()
  device = jax.devices()[0]
  data = {'jax': jax.__version__, 'device_kind': device.device_kind,
          'platform': device.platform, 'interpret': args.interpret,
          'cases': {}}
  for case in CASES:
    data['cases'][case] = encode(run(case, args.interpret))
    print(case, 'done', flush=True)
  probe_report.write(data, args.out, args.name)


if __name__ == '__main__':
  main()
