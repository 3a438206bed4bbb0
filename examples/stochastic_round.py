"""`pltpu.stochastic_round`: float32 to bfloat16, rounded up or down at random.

Each element becomes one of its two bfloat16 neighbours. As a TPU v5e does,
it is rounded away from zero iff the low 23 of its random bits, read as a
fraction of 2**23, are below its distance from the neighbour toward zero as
a fraction of the gap between the neighbours. So the result is unbiased:
over uniform bits its mean is `x`. The check recomputes the rule in numpy
from the bits of the float32 values, and measures the bias.
"""
import sys

import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
import jax.numpy as jnp
import numpy as np


def kernel(x_ref, bits_ref, o_ref):
  o_ref[...] = pltpu.stochastic_round(x_ref[...], bits_ref[...],
                                      target_dtype=jnp.bfloat16)


shape = (64, 128)
x = jax.random.normal(jax.random.key(0), shape, jnp.float32)
bits = jax.random.bits(jax.random.key(1), shape, jnp.uint32)
y = pl.pallas_call(
    kernel, out_shape=jax.ShapeDtypeStruct(shape, jnp.bfloat16),
    interpret=pltpu.InterpretParams(),
)(x, bits)

# numpy: the neighbour toward zero drops the low 16 bits of the float32.
x_np, bits_np = np.asarray(x), np.asarray(bits)
low = (x_np.view(np.uint32) & 0xFFFF0000).view(np.float32)
high = ((x_np.view(np.uint32) & 0xFFFF0000) + 0x10000).view(np.float32)
fraction = (np.abs(x_np) - np.abs(low)) / (np.abs(high) - np.abs(low))
away = (bits_np & 0x7FFFFF) / 2.0**23 < fraction
want = np.where(away, high, low)
got = np.asarray(y.astype(jnp.float32))
gap = np.abs(high - low)
print('rounded away from zero:', f'{away.mean():.3f}',
      '; mean bias in gaps:', f'{np.mean((got - x_np) / gap):+.4f}')
ok = np.array_equal(got, want) and abs(np.mean((got - x_np) / gap)) < 0.02
print('ok' if ok else 'MISMATCH')
sys.exit(0 if ok else 1)
