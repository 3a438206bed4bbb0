"""The subcores of each SparseCore look up rows of a table they share.

On a TPU v6e's 2 SparseCores of 16 vector subcores: subcore 0 of each
SparseCore copies the table into `VMEM_SHARED` (one buffer per SparseCore),
`plsc.subcore_barrier()` waits until every subcore of the SparseCore is
there, and then each subcore gathers its 8 rows, one DMA per lookup id, into
its private VMEM and writes them to its slice of the output. Every (core,
subcore) pair runs. `device_kind` tells the interpreter which TPU to
simulate, so the mesh can be built on CPU. numpy checks `table[ids]`.
"""
import sys

import jax
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas import tpu_sc as plsc
import jax.numpy as jnp
import numpy as np

VOCAB, DIM, LOOKUPS = 64, 8, 8  # LOOKUPS: ids per subcore.
f32 = jnp.float32


def lookup(table, ids):
  cores, subcores, _ = ids.shape
  mesh = plsc.VectorSubcoreMesh(core_axis_name='core',
                                subcore_axis_name='subcore', num_cores=cores)

  @pl.kernel(
      out_type=jax.ShapeDtypeStruct((cores, subcores, LOOKUPS, DIM), f32),
      mesh=mesh,
      scratch_types=[pltpu.VMEM_SHARED((VOCAB, DIM), f32),
                     pltpu.VMEM((LOOKUPS,), jnp.int32),
                     pltpu.VMEM((LOOKUPS, DIM), f32)],
  )
  def kernel(table_hbm, ids_hbm, rows_hbm, table_shared, ids_vmem, rows):
    core, subcore = lax.axis_index('core'), lax.axis_index('subcore')

    @pl.when(subcore == 0)
    def _():
      pltpu.sync_copy(table_hbm, table_shared)

    pltpu.sync_copy(ids_hbm.at[core, subcore], ids_vmem)
    plsc.subcore_barrier()  # The shared table is complete after this.
    ids = ids_vmem[...]  # Subcores load VMEM by vectors, not scalars.
    for i in range(LOOKUPS):
      pltpu.sync_copy(table_shared.at[ids[i]], rows.at[i])
    pltpu.sync_copy(rows, rows_hbm.at[core, subcore])

  return kernel(table, ids)


with pltpu.force_tpu_interpret_mode(pltpu.InterpretParams(
    device_kind='TPU v6 lite', detect_races=True)):
  info = plsc.get_sparse_core_info()
  table = jax.random.normal(jax.random.key(0), (VOCAB, DIM), f32)
  shape = (info.num_cores, info.num_subcores, LOOKUPS)
  ids = jax.random.randint(jax.random.key(1), shape, 0, VOCAB)
  rows = lookup(table, ids)
want = np.asarray(table)[np.asarray(ids)]
print('(cores, subcores, lookups):', shape, '; rows equal to numpy:',
      np.mean(np.asarray(rows) == want))
ok = np.array_equal(rows, want)
print('ok' if ok else 'MISMATCH')
sys.exit(0 if ok else 1)
