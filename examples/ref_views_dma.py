"""Ref views in DMAs: `ref.reshape(...)` and `ref.bitcast(...)`.

The kernel walks over a (CHUNKS * ROWS, 128) float32 array in HBM chunk by
chunk through a reshaped view, `x_hbm.reshape(CHUNKS, ROWS, 128).at[i]`, with
no index arithmetic. For each chunk it copies the chunk's raw bits to an
int32 output by DMA from a bitcast view of the VMEM buffer,
`buf.bitcast(jnp.int32)`, and stores each element's biased exponent, read
through the same view, to a second output. numpy checks both from the
float32 values' bits.
"""
import sys

import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
import jax.numpy as jnp
import numpy as np

CHUNKS, ROWS = 4, 8


def kernel(x_hbm, bits_hbm, exponent_ref, buf):
  x_chunks = x_hbm.reshape(CHUNKS, ROWS, 128)
  bits_chunks = bits_hbm.reshape(CHUNKS, ROWS, 128)
  for i in range(CHUNKS):
    pltpu.sync_copy(x_chunks.at[i], buf)
    pltpu.sync_copy(buf.bitcast(jnp.int32), bits_chunks.at[i])
    exponent_ref[i] = (buf.bitcast(jnp.int32)[...] >> 23) & 0xFF


x = jax.random.normal(jax.random.key(0), (CHUNKS * ROWS, 128), jnp.float32)
bits, exponent = pl.pallas_call(
    kernel,
    out_shape=(jax.ShapeDtypeStruct(x.shape, jnp.int32),
               jax.ShapeDtypeStruct((CHUNKS, ROWS, 128), jnp.int32)),
    in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
    out_specs=(pl.BlockSpec(memory_space=pl.ANY),
               pl.BlockSpec(memory_space=pltpu.VMEM)),
    scratch_shapes=[pltpu.VMEM((ROWS, 128), jnp.float32)],
    interpret=pltpu.InterpretParams(detect_races=True),
)(x)
want_bits = np.asarray(x).view(np.int32)
want_exponent = ((want_bits >> 23) & 0xFF).reshape(CHUNKS, ROWS, 128)
print('first exponents:', np.asarray(exponent)[0, 0, :4].tolist(),
      '(numpy:', want_exponent[0, 0, :4].tolist(), ')')
ok = (np.array_equal(bits, want_bits)
      and np.array_equal(exponent, want_exponent))
print('ok' if ok else 'MISMATCH')
sys.exit(0 if ok else 1)
