"""`detect_races=True` finds two TensorCores writing the same rows unordered.

Each of two cores scales its half of `x` into a VMEM buffer and copies it to
the output. The buggy kernel computes the output offset from the wrong
index, so both cores write rows 0-7 and nothing orders the two writes: a
race, which on a TPU would give whichever core wrote last. With
`InterpretParams(detect_races=True)` the interpreter raises an error that
names the two conflicting accesses (`on_race='warn'` only prints them).
The fixed kernel runs without one and matches numpy.
"""
import logging
import sys

import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
import jax.numpy as jnp
import numpy as np

# The interpreter logs the expected failure's traceback (as jax's
# io_callback does); the example prints the message itself.
logging.getLogger('jax._src.callback').setLevel(logging.CRITICAL)

f32 = jnp.float32


def scale_rows(buggy):
  @pl.kernel(out_type=jax.ShapeDtypeStruct((16, 128), f32),
             mesh=pltpu.TensorCoreMesh(axis_name='core', num_cores=2),
             scratch_types=[pltpu.VMEM((8, 128), f32)],
             interpret=pltpu.InterpretParams(detect_races=True))
  def kernel(x_hbm, o_hbm, buf):
    core = jax.lax.axis_index('core')
    pltpu.sync_copy(x_hbm.at[pl.ds(core * 8, 8)], buf)
    buf[...] = buf[...] * 2
    row = 0 if buggy else core * 8  # Bug: every core writes rows 0-7.
    pltpu.sync_copy(buf, o_hbm.at[pl.ds(row, 8)])

  return kernel


x = jax.random.normal(jax.random.key(0), (16, 128), f32)
try:
  jax.block_until_ready(scale_rows(buggy=True)(x))
  message = ''
except RuntimeError as e:
  message = str(e)
  pltpu.reset_tpu_interpret_mode_state()  # Needed after an error.
message = message[message.find('RACE DETECTED'):]
print('buggy kernel:', message)
y = scale_rows(buggy=False)(x)
print('fixed kernel: max |y - 2 x| =', np.abs(y - 2 * np.asarray(x)).max())
ok = ('RACE DETECTED' in message and 'write of' in message
      and np.array_equal(y, 2 * np.asarray(x)))
print('ok' if ok else 'MISMATCH')
sys.exit(0 if ok else 1)
