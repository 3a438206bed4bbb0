"""A missing signal is reported as a deadlock instead of hanging.

Four simulated devices form a ring and synchronize on the barrier semaphore
before they write into their neighbours: each should signal both neighbours
and wait for 2 signals. This kernel has a bug: it signals only its right
neighbour, so every device waits for a count of 2 that stays at 1. On a TPU
it would hang. TPU interpret mode sees that no device can make progress any
more and raises a `DeadlockError` that says, per device, where it waits, on
which semaphore, for which count, and what the count is. (Under `shard_map`
it reaches the caller inside a `JaxRuntimeError`.)
"""
import logging
import sys

import jax
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
import jax.numpy as jnp

# The interpreter logs the expected failure's traceback (as jax's
# io_callback does); the example prints the message itself.
logging.getLogger('jax._src.callback').setLevel(logging.CRITICAL)

DEVICES = 4
jax.config.update('jax_num_cpu_devices', DEVICES)  # Before jax starts.
P = jax.sharding.PartitionSpec


def ring_barrier_kernel(x_ref, o_ref):
  right = lax.rem(lax.axis_index('x') + 1, DEVICES)
  barrier = pltpu.get_barrier_semaphore()
  pl.semaphore_signal(barrier, 1, device_id=(right,))
  # Bug: the left neighbour is never signalled, so the count stays at 1.
  pl.semaphore_wait(barrier, 2)
  o_ref[...] = x_ref[...]


ring_barrier = pl.pallas_call(
    ring_barrier_kernel,
    out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
    compiler_params=pltpu.CompilerParams(collective_id=0),
    interpret=pltpu.InterpretParams(),  # detect_deadlocks=True by default.
)
mesh = jax.make_mesh((DEVICES,), ('x',))
x = jax.device_put(jnp.zeros((DEVICES * 8, 128), jnp.float32),
                   jax.sharding.NamedSharding(mesh, P('x')))
try:
  jax.block_until_ready(jax.jit(jax.shard_map(
      ring_barrier, mesh=mesh, in_specs=P('x'), out_specs=P('x'),
      check_vma=False))(x))
  message = ''
except RuntimeError as e:
  message = str(e)
  pltpu.reset_tpu_interpret_mode_state()  # Needed after an error.
message = message[message.find('DeadlockError'):]
print(message)
ok = (message.startswith('DeadlockError') and 'barrier semaphore' in message
      and 'to reach 2; its count is 1' in message)
print('ok' if ok else 'MISMATCH')
sys.exit(0 if ok else 1)
