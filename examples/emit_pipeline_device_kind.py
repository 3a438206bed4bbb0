"""`pltpu.emit_pipeline` on CPU, simulating a TPU v5e with `device_kind`.

`emit_pipeline` asks the TPU for its properties (`pltpu.get_tpu_info()`), so
on CPU it fails with "Unsupported TPU device kind: cpu". Running the kernel
under `pltpu.force_tpu_interpret_mode(InterpretParams(device_kind=...))`
makes the kernel, as it is traced, and the interpreter see that TPU. The
kernel is a blocked matmul: the outer kernel gets `x` and `y` in HBM, and
`emit_pipeline` streams (BM, K) and (K, BN) blocks into VMEM, multiplies
them and writes each (BM, BN) block of the result back.
"""
import sys

import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
import jax.numpy as jnp
import numpy as np

M, K, N, BM, BN = 256, 128, 256, 128, 128


def matmul_block(x_ref, y_ref, o_ref):
  o_ref[...] = jnp.dot(x_ref[...], y_ref[...],
                       preferred_element_type=jnp.float32)


def kernel(x_hbm, y_hbm, o_hbm):
  pltpu.emit_pipeline(
      matmul_block,
      grid=(M // BM, N // BN),
      in_specs=[pl.BlockSpec((BM, K), lambda i, j: (i, 0)),
                pl.BlockSpec((K, BN), lambda i, j: (0, j))],
      out_specs=pl.BlockSpec((BM, BN), lambda i, j: (i, j)),
  )(x_hbm, y_hbm, o_hbm)


def matmul(x, y):
  return pl.pallas_call(
      kernel,
      out_shape=jax.ShapeDtypeStruct((M, N), jnp.float32),
      in_specs=[pl.BlockSpec(memory_space=pl.ANY)] * 2,
      out_specs=pl.BlockSpec(memory_space=pl.ANY),
  )(x, y)


x = jax.random.normal(jax.random.key(0), (M, K), jnp.float32)
y = jax.random.normal(jax.random.key(1), (K, N), jnp.float32)
# pallas_call reads the forced interpret mode when it is called.
with pltpu.force_tpu_interpret_mode(
    pltpu.InterpretParams(device_kind='TPU v5 lite')):
  z = matmul(x, y)
want = np.asarray(x, np.float64) @ np.asarray(y, np.float64)
print('max |z - x @ y| =', np.abs(np.asarray(z) - want).max())
ok = np.allclose(z, want, atol=1e-3)
print('ok' if ok else 'MISMATCH')
sys.exit(0 if ok else 1)
