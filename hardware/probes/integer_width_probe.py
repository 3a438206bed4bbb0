"""Which integer widths a TPU computes with, in scalars and in vectors.

Issue 45, item 3: upstream's `PallasScalarIOpsTest` and
`PallasCallPoisonTest.test_{scalar,vector}_integer_addition`
(tpu_pallas_test.py) expect Mosaic to reject integer arithmetic on scalars
(SMEM) of other widths than 32 bits and on vectors (VMEM) narrower than
16 bits; TPU interpret mode computed them. This script compiles and runs, for
each integer dtype, one small kernel per operation: on scalars loaded from
and stored to SMEM, and on (64, 128) vectors in VMEM. It records, as JSON,
what each gives on this backend: the error class and message, or the result
and whether it equals NumPy's (computed in int64 and wrapped to the dtype's
width).

    python3 hardware/probes/integer_width_probe.py --out DIR [--ops a,b] \
        [--interpret]

`integer_width_probe_tpu_v5_lite.json` holds two such runs on a TPU v5e
(their commands are in it; jax 0.10.2): the chip computes NumPy's values
where it compiles, and rejects arithmetic on scalars narrower than 32 bits,
additions and products of vectors narrower than 16, and (failing to
legalize them) narrow vector shifts, divisions, `max`, `min` and most narrow
comparisons. `tests/hardware_parity_test.py` checks interpret mode against it.
"""

from __future__ import annotations

import argparse

import jax
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
import jax.numpy as jnp
import numpy as np
try:  # Imported as probes.<name> by tests/hardware_parity_test.py.
  from . import probe_report
except ImportError:  # Run as a script.
  import probe_report

DTYPES = ('int4', 'int8', 'int16', 'int32', 'uint4', 'uint8', 'uint16',
          'uint32')
VECTOR_SHAPE = (64, 128)


def _bits(dtype):
  return jnp.iinfo(dtype).bits


def _wrap(v, dtype):
  """`v` (int64) wrapped to `dtype`'s width, as int64."""
  bits = _bits(dtype)
  v = np.asarray(v, np.int64) % (1 << bits)
  if jnp.issubdtype(dtype, jnp.signedinteger):
    v = np.where(v >= 1 << (bits - 1), v - (1 << bits), v)
  return v


def _trunc_div(a, b):
  q = np.abs(a) // np.abs(b)
  return np.where((a < 0) != (b < 0), -q, q)


# name: (function of two jax values of one dtype, NumPy of int64 arrays).
# Every function returns a value of the operands' dtype.
OPS = {
    'copy': (lambda x, y: x, lambda x, y: x),
    'add': (lambda x, y: x + y, lambda x, y: x + y),
    'sub': (lambda x, y: x - y, lambda x, y: x - y),
    'mul': (lambda x, y: x * y, lambda x, y: x * y),
    'and': (lambda x, y: x & y, lambda x, y: x & y),
    'or': (lambda x, y: x | y, lambda x, y: x | y),
    'xor': (lambda x, y: x ^ y, lambda x, y: x ^ y),
    'not': (lambda x, y: ~x, lambda x, y: ~x),
    'neg': (lambda x, y: -x, lambda x, y: -x),
    'shl': (lambda x, y: lax.shift_left(x, y), lambda x, y: x << y),
    'shr': (lambda x, y: x >> y, lambda x, y: x >> y),
    'max': (jnp.maximum, np.maximum),
    'min': (jnp.minimum, np.minimum),
    'lt': (lambda x, y: (x < y).astype(x.dtype),
           lambda x, y: (x < y).astype(np.int64)),
    'select': (lambda x, y: jnp.where(x < y, y, x), np.maximum),
    'eq': (lambda x, y: (x == y).astype(x.dtype),
           lambda x, y: (x == y).astype(np.int64)),
    'ne': (lambda x, y: (x != y).astype(x.dtype),
           lambda x, y: (x != y).astype(np.int64)),
    'le': (lambda x, y: (x <= y).astype(x.dtype),
           lambda x, y: (x <= y).astype(np.int64)),
    'gt': (lambda x, y: (x > y).astype(x.dtype),
           lambda x, y: (x > y).astype(np.int64)),
    'ge': (lambda x, y: (x >= y).astype(x.dtype),
           lambda x, y: (x >= y).astype(np.int64)),
    # A select of narrow values by a predicate computed in int32.
    'select_i32': (lambda x, y: jnp.where(
        x.astype(jnp.int32) < y.astype(jnp.int32), y, x), np.maximum),
    'abs': (lambda x, y: jnp.abs(x), lambda x, y: np.abs(x)),
    # NumPy's reference needs the width: see `run`.
    'shr_logical': (lax.shift_right_logical, None),
    'clamp': (lambda x, y: lax.clamp(jnp.ones_like(x), x, jnp.full_like(
        x, 4)), lambda x, y: np.clip(x, 1, 4)),
    'div': (lax.div, _trunc_div),
    'rem': (lax.rem, lambda x, y: x - y * _trunc_div(x, y)),
    # Widened to int32, added to, narrowed back: the usual workaround.
    'via_i32': (lambda x, y: (x.astype(jnp.int32) + y.astype(jnp.int32))
                .astype(x.dtype), lambda x, y: x + y),
    'const': (lambda x, y: jnp.full(x.shape, 3, x.dtype),
              lambda x, y: np.full(x.shape, 3)),
}


def _operands(dtype, shape):
  """x in [0, 8) (and negative for signed dtypes), y in [1, 3]."""
  n = int(np.prod(shape))
  x = np.arange(n) % 8
  if jnp.issubdtype(dtype, jnp.signedinteger):
    x = np.where(np.arange(n) % 3 == 0, -x, x)
  y = 1 + np.arange(n) % 3
  return x.reshape(shape), y.reshape(shape)


def run(kind, op, dtype_name, interpret=False):
  """One case; `interpret`: False, True or an `InterpretParams`."""
  dtype = jnp.dtype(dtype_name)
  fn, ref = OPS[op]
  if op == 'shr_logical':
    ref = lambda x, y: (x % (1 << _bits(dtype))) >> y
  if kind == 'scalar':
    shape = (4,)
    space = pltpu.SMEM

    def kernel(x_ref, y_ref, o_ref):
      o_ref[0] = fn(x_ref[1], y_ref[2])
  else:
    shape = VECTOR_SHAPE
    space = pltpu.VMEM

    def kernel(x_ref, y_ref, o_ref):
      o_ref[...] = fn(x_ref[...], y_ref[...])
  x, y = _operands(dtype, shape)
  spec = pl.BlockSpec(memory_space=space)
  f = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(shape, dtype),
                     in_specs=[spec, spec], out_specs=spec,
                     interpret=(pltpu.InterpretParams() if interpret is True
                                else interpret))
  try:
    out = np.asarray(jax.block_until_ready(
        f(jnp.asarray(x, dtype), jnp.asarray(y, dtype))))
  except Exception as e:  # pylint: disable=broad-except
    return {'error': type(e).__name__,
            'module': type(e).__module__, 'message': str(e)[:1500]}
  got = out.astype(np.int64)
  if kind == 'scalar':
    expected, got = _wrap(ref(x[1:2], y[2:3]), dtype), got[:1]
  else:
    expected = _wrap(ref(x, y), dtype)
  return {'result': 'ok', 'equal': bool(np.array_equal(got, expected)),
          'first': got.ravel()[:8].tolist()}


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--out', required=True)
  parser.add_argument('--ops', default=','.join(OPS))
  parser.add_argument('--dtypes', default=','.join(DTYPES))
  parser.add_argument('--kinds', default='scalar,vector')
  parser.add_argument('--name', default='integer_width_probe.json')
  parser.add_argument('--interpret', action='store_true',
                      help='run in TPU interpret mode instead')
  args = parser.parse_args()
  device = jax.devices()[0]
  data = {'jax': jax.__version__, 'jaxlib': jax.lib.__version__,
          'interpret': args.interpret, 'device_kind': device.device_kind, 'platform': device.platform,
          'cases': []}
  for kind in args.kinds.split(','):
    for op in args.ops.split(','):
      for dtype in args.dtypes.split(','):
        entry = {'kind': kind, 'op': op, 'dtype': dtype}
        entry.update(run(kind, op, dtype, args.interpret))
        print(kind, op, dtype, entry.get('error', entry.get('equal')),
              entry.get('message', '')[:160].replace('\n', ' '), flush=True)
        data['cases'].append(entry)
  probe_report.write(data, args.out, args.name)


if __name__ == '__main__':
  main()
