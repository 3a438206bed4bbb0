"""Why three upstream matmul tests pass on a TPU v5e and fail in interpret mode.

Issue 45, item 4: `test_stateful_matmul` (tpu_pallas_state_test.py),
`test_pipeline_matmul0/1` (tpu_pallas_pipeline_test.py) and
`test_megacore_splitting` (tpu_pallas_test.py) compare a Pallas kernel's
float32 matmul with `jnp.dot` / `x @ y` computed outside the kernel on the
default backend. This script runs the tests' kernels (copied from upstream's
files at jax-v0.10.2, the kernel's `jnp.dot` precision made a parameter) and
prints, as JSON, the largest absolute differences between:

- the kernel at the default precision and at HIGHEST;
- the test's reference on this backend at the default precision and at
  HIGHEST (`jnp.dot`, `x @ y`);
- a float64 NumPy product, and two emulations of a TPU's default precision:
  the operands rounded to bfloat16, multiplied exactly (float64) per
  128-deep block of the contraction and the blocks summed in float32
  (`bf16_blocked_f32`), or all at once (`bf16_f64`);
- and whether the test's own `assert_allclose` holds for each pair.

Two modes:

    # On the TPU, compiled by Mosaic: writes DIR/matmul_probe.json
    # and DIR/matmul_probe.npz (the operands and the kernels' outputs).
    python3 hardware/probes/matmul_probe.py chip --out DIR
    # On CPU, with the series applied: the same kernels in TPU interpret mode
    # (matmul_precision "float32" and "tpu"), compared with the chip's outputs.
    python hardware/probes/matmul_probe.py interpret --chip DIR/matmul_probe.npz
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import sys

import jax
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
import jax.numpy as jnp
import ml_dtypes
import numpy as np
try:  # Imported as probes.<name> by tests/hardware_parity_test.py.
  from . import probe_report
except ImportError:  # Run as a script.
  import probe_report

M = K = N = 512
B = 128
HIGHEST = lax.Precision.HIGHEST


def stateful_matmul(x, y, precision=None):
  """tpu_pallas_state_test.py::test_stateful_matmul's `matmul`."""
  m, k, n = M, K, N
  bm, bk, bn = B, B, B

  def matmul_kernel(acc_ref, x_ref, y_ref, o_ref):
    @pl.when(pl.program_id(2) == 0)
    def _():
      acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(x_ref[...], y_ref[...],
                            preferred_element_type=jnp.float32,
                            precision=precision)

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _():
      o_ref[...] = acc_ref[...].astype(o_ref.dtype)

  def run_matmul(refs):
    x_ref, y_ref, o_ref = refs

    def matmul_pipeline_kernel(acc_ref):
      pltpu.emit_pipeline(
          functools.partial(matmul_kernel, acc_ref),
          grid=(m // bm, n // bn, k // bk),
          in_specs=[pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)),
                    pl.BlockSpec((bk, bn), lambda i, j, k: (k, j))],
          out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),
      )(x_ref, y_ref, o_ref)

    pl.pallas_call(matmul_pipeline_kernel, out_shape=[],
                   scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)])()

  _, _, o = pl.run_state(run_matmul)((x, y, jnp.ones((m, n), x.dtype)))
  return o


def pipeline_matmul(x, y, precision=None, no_pipelining=False):
  """tpu_pallas_pipeline_test.py::test_pipeline_matmul's `z`."""

  def matmul_pipeline(x_ref, y_ref, z_ref):
    @pl.when(pl.program_id(2) == 0)
    def _():
      z_ref[...] = jnp.zeros(z_ref.shape, jnp.float32)

    z_ref[...] += jnp.dot(x_ref[...], y_ref[...], precision=precision)

  def matmul_kernel(x_ref, y_ref, z_ref):
    pltpu.emit_pipeline(
        matmul_pipeline, grid=(4, 4, 4),
        in_specs=[pl.BlockSpec((B, B), lambda i, j, k: (i, k)),
                  pl.BlockSpec((B, B), lambda i, j, k: (k, j))],
        out_specs=pl.BlockSpec((B, B), lambda i, j, k: (i, j)),
        no_pipelining=no_pipelining,
    )(x_ref, y_ref, z_ref)

  return pl.pallas_call(
      matmul_kernel, out_shape=jax.ShapeDtypeStruct((M, N), jnp.float32),
      in_specs=[pl.BlockSpec(memory_space=pl.ANY)] * 2,
      out_specs=pl.BlockSpec(memory_space=pl.ANY))(x, y)


def megacore_matmul(x, y, precision=None):
  """tpu_pallas_test.py::test_megacore_splitting's kernel, on (3, 3) pairs."""

  def matmul_kernel(x_ref, y_ref, z_ref):
    @pl.when(pl.program_id(2) == 0)
    def _():
      z_ref[...] = jnp.zeros_like(z_ref)
    z_ref[...] += jnp.dot(x_ref[...], y_ref[...], precision=precision)

  f = pl.pallas_call(
      matmul_kernel, out_shape=jax.ShapeDtypeStruct((M, N), jnp.float32),
      grid=(4, 4, 4),
      in_specs=[pl.BlockSpec((B, B), lambda i, j, k: (i, k)),
                pl.BlockSpec((B, B), lambda i, j, k: (k, j))],
      out_specs=pl.BlockSpec((B, B), lambda i, j, k: (i, j)))
  return jax.vmap(jax.vmap(f))(x, y)


def operands():
  """Each test's operands, as the test makes them."""
  sx = jax.random.normal(jax.random.key(0), (M, K), jnp.float32)
  sy = jax.random.normal(jax.random.key(1), (K, N), jnp.float32)
  k1, k2 = jax.random.split(jax.random.key(0))
  px = jax.random.uniform(k1, (M, K))
  py = jax.random.uniform(k2, (K, N))
  k1, k2 = jax.random.split(jax.random.key(0))
  mx = jax.random.uniform(k1, (3, 3, M, K))
  my = jax.random.uniform(k2, (3, 3, K, N))
  return {'stateful': (sx, sy), 'pipeline': (px, py), 'megacore': (mx, my)}


# Each test's comparison: assert_allclose(kernel, reference, **tolerance).
TOLERANCE = {'stateful': dict(atol=0),  # On v5e (2e-5 on v6 and later).
             'pipeline': dict(atol=5e-5), 'megacore': dict(rtol=1e-6)}


def _bf16(a):
  return np.asarray(a, np.float32).astype(ml_dtypes.bfloat16).astype(
      np.float64)


def emulations(x, y):
  """NumPy products of float32 operands (batched over leading axes)."""
  x, y = np.asarray(x, np.float32), np.asarray(y, np.float32)
  xb, yb = _bf16(x), _bf16(y)
  acc = np.zeros(x.shape[:-1] + y.shape[-1:], np.float32)
  for k in range(0, x.shape[-1], B):
    acc = acc + np.matmul(xb[..., k:k + B], yb[..., k:k + B, :]).astype(
        np.float32)
  return {'f64': np.matmul(x.astype(np.float64), y.astype(np.float64)),
          'bf16_f64': np.matmul(xb, yb),
          'bf16_blocked_f32': acc}


def compare(a, b, tolerance):
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  try:
    np.testing.assert_allclose(a.astype(np.float32), b.astype(np.float32),
                               **tolerance)
    ok = True
  except AssertionError:
    ok = False
  return {'max_abs': float(np.max(np.abs(a - b))),
          'equal': round(float(np.mean(a == b)), 6), 'test_passes': ok}


def digest(a):
  return hashlib.sha256(np.ascontiguousarray(np.asarray(a))).hexdigest()[:16]


def kernels(name, x, y, precision):
  if name == 'stateful':
    return stateful_matmul(x, y, precision)
  if name == 'pipeline':
    return pipeline_matmul(x, y, precision)
  return megacore_matmul(x, y, precision)


def chip(out_dir):
  ops = operands()
  report = {'backend': jax.default_backend(),
            'device_kind': jax.devices()[0].device_kind,
            'jax_version': jax.__version__, 'cases': {}}
  arrays = {}
  for name, (x, y) in ops.items():
    outs = {'kernel_default': kernels(name, x, y, None),
            'kernel_highest': kernels(name, x, y, HIGHEST)}
    if name == 'pipeline':
      outs['kernel_default_no_pipelining'] = pipeline_matmul(
          x, y, None, no_pipelining=True)
    dot = (lambda a, b, **kw: jax.vmap(jax.vmap(
        functools.partial(jnp.dot, **kw)))(a, b)) if name == 'megacore' else (
            lambda a, b, **kw: jnp.dot(a, b, **kw))
    refs = {'ref_default': dot(x, y), 'ref_highest': dot(x, y,
                                                          precision=HIGHEST)}
    cpu = jax.devices('cpu')[0]
    xc, yc = jax.device_put(x, cpu), jax.device_put(y, cpu)
    refs['ref_cpu_default'] = dot(xc, yc)
    refs.update(emulations(x, y))
    outs = {k: np.asarray(v) for k, v in outs.items()}
    refs = {k: np.asarray(v) for k, v in refs.items()}
    tol = TOLERANCE[name]
    case = {'tolerance': tol, 'x_sha': digest(x), 'y_sha': digest(y),
            'kernel_vs': {}}
    for k, v in outs.items():
      case['kernel_vs'][k] = {r: compare(v, w, tol) for r, w in refs.items()}
    case['ref_default_vs'] = {r: compare(refs['ref_default'], w, tol)
                              for r, w in refs.items() if r != 'ref_default'}
    report['cases'][name] = case
    sl = (0, 0) if name == 'megacore' else ()
    arrays[f'{name}_x'] = np.asarray(x)[sl]
    arrays[f'{name}_y'] = np.asarray(y)[sl]
    for k in ('kernel_default', 'kernel_highest'):
      arrays[f'{name}_{k}'] = outs[k][sl]
    arrays[f'{name}_ref_default'] = refs['ref_default'][sl]
  probe_report.write(report, out_dir, 'matmul_probe.json')
  np.savez(os.path.join(out_dir, 'matmul_probe.npz'), **arrays)
  json.dump(report, sys.stdout, indent=1)


def interpret(chip_npz):
  """The kernels in TPU interpret mode, on the chip's operands."""
  saved = np.load(chip_npz)
  report = {'backend': jax.default_backend(), 'jax_version': jax.__version__,
            'cases': {}}
  ops = operands()
  for name in ('stateful', 'pipeline', 'megacore'):
    x, y = saved[f'{name}_x'], saved[f'{name}_y']
    if name == 'megacore':  # The chip's (0, 0) pair, as a batch of one.
      x, y = x[None, None], y[None, None]
    case = {'same_operands_as_here': bool(
        np.array_equal(np.asarray(ops[name][0])[(0, 0) if name == 'megacore'
                                                else ()],
                       saved[f'{name}_x'])), 'tolerance': TOLERANCE[name]}
    dot = (lambda a, b: jax.vmap(jax.vmap(jnp.dot))(a, b)) if (
        name == 'megacore') else jnp.dot
    refs = {'chip_kernel_default': saved[f'{name}_kernel_default'],
            'chip_ref_default': saved[f'{name}_ref_default'],
            'cpu_ref_default': np.asarray(dot(x, y))}
    refs.update(emulations(x, y))
    if name == 'megacore':
      refs = {k: np.asarray(v).reshape(M, N) for k, v in refs.items()}
    for mode in ('float32', 'tpu'):
      with pltpu.force_tpu_interpret_mode(pltpu.InterpretParams(
          matmul_precision=mode, device_kind='TPU v5 lite')):
        out = np.asarray(kernels(name, x, y, None)).reshape(M, N)
      case[f'interpret_{mode}_vs'] = {
          r: compare(out, w, TOLERANCE[name]) for r, w in refs.items()}
    case['cpu_ref_default_vs'] = {
        r: compare(refs['cpu_ref_default'], w, TOLERANCE[name])
        for r, w in refs.items() if r != 'cpu_ref_default'}
    report['cases'][name] = case
  json.dump(report, sys.stdout, indent=1)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('mode', choices=('chip', 'interpret'))
  parser.add_argument('--out', default='.')
  parser.add_argument('--chip', default='matmul_probe.npz')
  args = parser.parse_args()
  if args.mode == 'chip':
    chip(args.out)
  else:
    interpret(args.chip)


if __name__ == '__main__':
  main()
