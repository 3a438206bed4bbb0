"""Dropout with the TPU's PRNG: `pltpu.prng_seed` and `pltpu.prng_random_bits`.

Each grid step seeds the PRNG with the seed and its block index, draws 32
random bits per element and drops the element (sets it to 0) when the bits,
read as an unsigned integer, fall below RATE * 2**32; the others are scaled
by 1 / (1 - RATE). Interpret mode cannot reproduce the TPU's bits, but they
are deterministic in the seed and uniform, so the check is statistical: the
drop rate is RATE within 5 standard deviations, the kept elements are
`x / (1 - RATE)`, the same seed gives the same mask and another seed
another, and the blocks get different masks.
"""
import sys

import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
import jax.numpy as jnp
import numpy as np

RATE, BLOCKS, ROWS, COLS = 0.25, 4, 8, 128


def dropout_kernel(seed_ref, x_ref, o_ref):
  pltpu.prng_seed(seed_ref[0], pl.program_id(0))
  bits = pltpu.bitcast(pltpu.prng_random_bits((ROWS, COLS)), jnp.uint32)
  keep = bits >= jnp.uint32(RATE * 2**32)
  o_ref[...] = jnp.where(keep, x_ref[...] / (1 - RATE), 0.0)


def dropout(seed, x):
  return pl.pallas_call(
      dropout_kernel,
      out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
      grid=(BLOCKS,),
      in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM),
                pl.BlockSpec((ROWS, COLS), lambda i: (i, 0))],
      out_specs=pl.BlockSpec((ROWS, COLS), lambda i: (i, 0)),
      interpret=pltpu.InterpretParams(),
  )(jnp.array([seed], jnp.int32), x)


x = jax.random.uniform(jax.random.key(0), (BLOCKS * ROWS, COLS), minval=1.0)
y, again, other = (np.asarray(dropout(s, x)) for s in (7, 7, 8))
dropped = y == 0
rate, n = dropped.mean(), dropped.size
masks = dropped.reshape(BLOCKS, ROWS * COLS)
print(f'drop rate {rate:.3f} (want {RATE}); same seed, same mask:',
      np.array_equal(y, again), '; other seed, other mask:',
      not np.array_equal(dropped, other == 0))
ok = (abs(rate - RATE) < 5 * np.sqrt(RATE * (1 - RATE) / n)
      and np.allclose(y[~dropped], np.asarray(x)[~dropped] / (1 - RATE))
      and np.array_equal(y, again) and not np.array_equal(dropped, other == 0)
      and len({m.tobytes() for m in masks}) == BLOCKS)
print('ok' if ok else 'MISMATCH')
sys.exit(0 if ok else 1)
