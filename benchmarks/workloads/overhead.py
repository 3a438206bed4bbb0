"""Kernels that use none of the patched features, for the overhead figure.

Runs on stock and on patched jax alike (no non-decrementing wait, no
`semaphore_read`, no collective `run_scoped`, signals always name their
core) and times, interleaved:

- `matmul_grid`: a blocked matmul over a 3D grid with an accumulator.
- `dma_double_buffer`: a manual double-buffered HBM -> VMEM -> HBM copy.
- `core_map_semaphores`: a 2-core `pl.kernel` whose cores ping-pong on
  REGULAR semaphores.
- `ring_remote_dma`: a 4-device ring (`shard_map`) that forwards blocks with
  remote DMAs after a neighbour barrier.
- `sparsecore_gather`: a SparseCore kernel on a 1 x 1
  `plsc.VectorSubcoreMesh` (one SparseCore, one vector subcore, of a TPU
  v6e) that gathers rows of an HBM table by ids. Stock interpret mode runs
  only subcore 0 of a SparseCore mesh, so with one subcore stock and
  patched jax do the same work.
- `random_tracing`: no kernel: traces, with the default threefry
  implementation, `jax.random.key` of a scalar seed, `split` into 8 keys,
  `fold_in`, and `bits` and `uniform` of an (8, n) shape new to the
  process, as every jax user does; the series' #42 makes the random
  primitives' abstract evaluation look for the ordered effects of their
  implementation's functions, which must cost nothing for jax's own.

Prints `{"wall": {name: [seconds, ...]}, "cpu": {...}, "callbacks": {name:
count}}`, where `callbacks` is the number of io_callbacks (interpreter steps)
one call runs, counted after the timed calls.
"""

from collections.abc import Callable

import jax

NUM_DEVICES = 4
# Simulate NUM_DEVICES CPU devices; must happen before jax's first use.
jax.config.update('jax_num_cpu_devices', NUM_DEVICES)

# pylint: disable=g-import-not-at-top
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas import tpu_sc as plsc
import jax.numpy as jnp
import numpy as np

import _common
import _ring
# pylint: enable=g-import-not-at-top

P = jax.sharding.PartitionSpec


def matmul_grid() -> Callable[[], object]:
  """A (256, 256) @ (256, 256) matmul in (128, 128) blocks: a 2x2x2 grid."""
  m = n = k = 256
  bm = bn = bk = 128

  def kernel(x_ref, y_ref, o_ref, acc_ref):
    @pl.when(pl.program_id(2) == 0)
    def _():
      acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(x_ref[...], y_ref[...],
                            preferred_element_type=jnp.float32)

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _():
      o_ref[...] = acc_ref[...]

  call = pl.pallas_call(
      kernel,
      out_shape=jax.ShapeDtypeStruct((m, n), jnp.float32),
      grid=(m // bm, n // bn, k // bk),
      in_specs=[pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),
                pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j))],
      out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
      scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
      interpret=pltpu.InterpretParams(),
  )
  kx, ky = jax.random.split(jax.random.key(0))
  x = jax.random.normal(kx, (m, k), jnp.float32)
  y = jax.random.normal(ky, (k, n), jnp.float32)
  f = jax.jit(call)
  np.testing.assert_allclose(f(x, y), x @ y, rtol=1e-4, atol=1e-3)
  return lambda: jax.block_until_ready(f(x, y))


def dma_double_buffer() -> Callable[[], object]:
  """Doubles 8 chunks of (64, 128), prefetching chunk i+1 during chunk i."""
  chunks, rows, cols = 8, 64, 128

  def kernel(x_hbm, o_hbm, buf, sems):
    def copy_in(i, slot):
      return pltpu.make_async_copy(
          x_hbm.at[pl.ds(i * rows, rows)], buf.at[slot], sems.at[slot])

    copy_in(0, 0).start()

    def step(i, carry):
      slot = i % 2

      @pl.when(i + 1 < chunks)
      def _():
        copy_in(i + 1, 1 - slot).start()

      copy_in(i, slot).wait()
      buf[slot] = buf[slot] * 2.0
      pltpu.sync_copy(buf.at[slot], o_hbm.at[pl.ds(i * rows, rows)])
      return carry

    lax.fori_loop(0, chunks, step, None)

  call = pl.pallas_call(
      kernel,
      out_shape=jax.ShapeDtypeStruct((chunks * rows, cols), jnp.float32),
      in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
      out_specs=pl.BlockSpec(memory_space=pl.ANY),
      scratch_shapes=[pltpu.VMEM((2, rows, cols), jnp.float32),
                      pltpu.SemaphoreType.DMA((2,))],
      interpret=pltpu.InterpretParams(),
  )
  x = jax.random.normal(jax.random.key(1), (chunks * rows, cols), jnp.float32)
  f = jax.jit(call)
  np.testing.assert_allclose(f(x), 2 * x)
  return lambda: jax.block_until_ready(f(x))


def core_map_semaphores(
    interpret: pltpu.InterpretParams | None = None,
) -> Callable[[], object]:
  """2 cores: 4 rounds of compute, signal the other core, wait for it.

  Args:
    interpret: The interpreter's parameters (default: `InterpretParams()`).
  """
  num_cores, rounds, rows, cols = 2, 4, 64, 128
  mesh = pltpu.TensorCoreMesh(axis_name='core', num_cores=num_cores)

  @pl.kernel(
      out_type=jax.ShapeDtypeStruct((num_cores * rows, cols), jnp.float32),
      mesh=mesh,
      scratch_types=[pltpu.VMEM((rows, cols), jnp.float32),
                     pltpu.SemaphoreType.REGULAR],
      interpret=interpret or pltpu.InterpretParams(),
  )
  def kernel(x_hbm, o_hbm, buf, sem):
    core = lax.axis_index('core')
    block = pl.ds(pl.multiple_of(core * rows, rows), rows)
    pltpu.sync_copy(x_hbm.at[block], buf)

    def step(i, carry):
      buf[...] = buf[...] + 1.0
      pl.semaphore_signal(sem, 1, core_index=1 - core)
      pl.semaphore_wait(sem, 1)
      return carry

    lax.fori_loop(0, rounds, step, None)
    pltpu.sync_copy(buf, o_hbm.at[block])

  x = jax.random.normal(jax.random.key(2), (num_cores * rows, cols))
  f = jax.jit(kernel)
  np.testing.assert_allclose(f(x), x + rounds, rtol=1e-6)
  return lambda: jax.block_until_ready(f(x))


def ring_remote_dma() -> Callable[[], object]:
  """4 devices: barrier with both neighbours, then a ring all-gather."""
  rows, cols = 8, 128

  gather = _ring.all_gather(NUM_DEVICES, rows, cols,
                            pltpu.InterpretParams())
  mesh = jax.make_mesh((NUM_DEVICES,), ('x',),
                       devices=jax.devices()[:NUM_DEVICES])
  f = jax.jit(jax.shard_map(
      lambda b: gather(b).reshape(NUM_DEVICES * rows, cols), mesh=mesh,
      in_specs=P('x'), out_specs=P('x'), check_vma=False))
  x = jax.random.uniform(jax.random.key(3), (NUM_DEVICES * rows, cols))
  x = jax.device_put(x, jax.sharding.NamedSharding(mesh, P('x')))
  np.testing.assert_array_equal(f(x), np.tile(np.asarray(x), (NUM_DEVICES, 1)))
  return lambda: jax.block_until_ready(f(x))


def _tpu_v6e():
  """On CPU, a SparseCore mesh needs the TPU it targets: here a v6e."""
  return jax.sharding.use_abstract_mesh(jax.sharding.AbstractMesh(
      (), (), abstract_device=jax.sharding.AbstractDevice('TPU v6e', 1, 'tpu')))


def sparsecore_gather() -> Callable[[], object]:
  """1 SparseCore x 1 subcore: 32 rows of a (64, 8) table, gathered by id."""
  vocab, dim, lookups = 64, 8, 32
  with _tpu_v6e():
    mesh = plsc.VectorSubcoreMesh(core_axis_name='core',
                                  subcore_axis_name='subcore', num_cores=1,
                                  num_subcores=1)

  @pl.kernel(
      out_type=jax.ShapeDtypeStruct((lookups, dim), jnp.float32),
      mesh=mesh,
      scratch_types=[pltpu.VMEM((lookups,), jnp.int32),
                     pltpu.VMEM((lookups, dim), jnp.float32)],
      interpret=pltpu.InterpretParams(),
  )
  def kernel(table_hbm, ids_hbm, o_hbm, ids_vmem, rows_vmem):
    pltpu.sync_copy(ids_hbm, ids_vmem)
    # Mosaic lowers no scalar load from a vector subcore's VMEM: load the ids
    # as one vector, then take each id from it.
    ids = ids_vmem[...]
    for i in range(lookups):
      pltpu.sync_copy(table_hbm.at[ids[i]], rows_vmem.at[i])
    rows_vmem[...] = rows_vmem[...] * 2.0
    pltpu.sync_copy(rows_vmem, o_hbm)

  kt, ki = jax.random.split(jax.random.key(4))
  table = jax.random.normal(kt, (vocab, dim), jnp.float32)
  ids = jax.random.randint(ki, (lookups,), 0, vocab)
  f = jax.jit(kernel)

  def call():
    with _tpu_v6e():
      return jax.block_until_ready(f(table, ids))

  np.testing.assert_array_equal(call(), 2 * np.asarray(table)[np.asarray(ids)])
  return call


def random_tracing() -> Callable[[], object]:
  """Traces key, split, fold_in, and bits and uniform of a new (8, n)."""
  next_n = [1]

  def draws(key, shape):
    keys = jax.random.split(key, shape[:1])
    folded = jax.random.fold_in(key, 7)
    return (jax.random.key_data(keys), jax.random.key_data(folded),
            jax.random.bits(folded, shape), jax.random.uniform(key, shape))

  def call():
    shape = (8, next_n[0])
    next_n[0] += 1
    jaxpr = jax.make_jaxpr(
        lambda s: draws(jax.random.key(s), shape))(0).jaxpr
    assert not jaxpr.effects, jaxpr.effects
    return jaxpr

  # No numbers to check: what is traced is checked instead, and that it has
  # no effects (jax's threefry has none).
  prims = {e.primitive.name for e in call().eqns}
  assert {'random_seed', 'random_split', 'random_fold_in',
          'random_bits'} <= prims, prims
  return call


KERNELS = {
    'matmul_grid': matmul_grid,
    'dma_double_buffer': dma_double_buffer,
    'core_map_semaphores': core_map_semaphores,
    'ring_remote_dma': ring_remote_dma,
    'sparsecore_gather': sparsecore_gather,
    'random_tracing': random_tracing,
}


def main():
  args = _common.parse_args()
  fns = {name: make() for name, make in KERNELS.items()}
  timings = _common.time_interleaved(fns, args.repeats)
  _common.emit({**timings, 'callbacks': _common.count_callbacks(fns)})


if __name__ == '__main__':
  main()
