"""What a TPU does with an int32 array in SEMAPHORE memory.

Issue 45: upstream's `CoreMapTest.test_kernel_with_output_memory_space`
(tpu_pallas_state_test.py) lowers a `pl.kernel` whose output is an int32
array in SEMAPHORE memory and reads the lowered text; on the TPU it passes
without compiling the kernel. TPU interpret mode refuses such arrays with
`NotImplementedError` when it lowers the kernel (only semaphore-typed arrays
live in SEMAPHORE memory there). This script compiles and runs, each in its
own process (the compiler may abort it), a copy of an (8, 128) int32 array
into

- `core_map_semaphore`: a `pl.kernel` output in SEMAPHORE memory (the
  test's kernel);
- `core_map_smem`: the same in SMEM (the control);
- `pallas_call_semaphore`: a `pallas_call` output block in SEMAPHORE memory,

and records, as JSON, what each gives: the result and whether it equals the
input, the error class and message, or, for a process that died, its exit
status and its stderr's `Check failed` line (else its last line).

    python3 hardware/probes/semaphore_memory_probe.py --out DIR [--interpret]

`semaphore_memory_probe_tpu_v5_lite.json` holds a run on a TPU v5e (jax
0.10.2): the SMEM copy runs; the SEMAPHORE output of `pl.kernel` aborts the
process in XLA's compiler (`Check failed: ... Unsupported source memory
space`), and the `pallas_call` one fails to compile ("Operand windows can
only be requested in VMEM, SMEM, or HOST"). `tests/hardware_parity_test.py`
checks that interpret mode refuses what the chip does not run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
import jax.numpy as jnp
import numpy as np
try:  # Imported as probes.<name> by tests/hardware_parity_test.py.
  from . import probe_report
except ImportError:  # Run as a script.
  import probe_report

CASES = ('core_map_semaphore', 'core_map_smem', 'pallas_call_semaphore')


def run(case, interpret=False):
  """One case in this process; `interpret`: False, True or InterpretParams."""
  if interpret is True:
    interpret = pltpu.InterpretParams()
  x = jnp.arange(8 * 128, dtype=jnp.int32).reshape((8, 128))

  def body(x_ref, o_ref):
    pltpu.sync_copy(x_ref, o_ref)

  if case.startswith('core_map_'):
    space = pltpu.SEMAPHORE if case.endswith('semaphore') else pltpu.SMEM
    # jax 0.10's name of pltpu.TensorCoreMesh(axis_name="x", num_cores=1).
    mesh = pltpu.create_tensorcore_mesh('x', num_cores=1)
    extra = {'interpret': interpret} if interpret else {}
    f = pl.kernel(body, out_type=space(x.shape, x.dtype), mesh=mesh, **extra)
  else:
    f = pl.pallas_call(
        body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pltpu.SEMAPHORE),
        interpret=interpret)
  try:
    out = np.asarray(jax.block_until_ready(jax.jit(f)(x)))
  except Exception as e:  # pylint: disable=broad-except
    return {'error': type(e).__name__, 'module': type(e).__module__,
            'message': str(e)[:1500]}
  return {'result': 'ok', 'equal': bool(np.array_equal(out, np.asarray(x))),
          'first': out.ravel()[:8].tolist()}


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--out', help='where to write the JSON (not with --case)')
  parser.add_argument('--name', default='semaphore_memory_probe.json')
  parser.add_argument('--interpret', action='store_true',
                      help='run in TPU interpret mode instead')
  parser.add_argument('--case', choices=CASES,
                      help='run one case here and print its JSON')
  args = parser.parse_args()
  if args.case:
    device = jax.devices()[0]
    print(json.dumps({'jax': jax.__version__, 'jaxlib': jax.lib.__version__,
                      'device_kind': device.device_kind,
                      'platform': device.platform}), flush=True)
    print(json.dumps(run(args.case, args.interpret)), flush=True)
    return
  if not args.out:
    parser.error('--out is required unless --case is given')
  # Only the cases' processes open the TPU: one process at a time can.
  data = {'interpret': args.interpret, 'cases': []}
  for case in CASES:
    proc = subprocess.run(
        [sys.executable, __file__, '--case', case]
        + (['--interpret'] if args.interpret else []),
        capture_output=True, text=True, check=False)
    entry = {'case': case}
    out = proc.stdout.splitlines()
    if out:  # What the case's process runs on.
      data.update(json.loads(out[0]))
    if proc.returncode == 0:
      entry.update(json.loads(out[-1]))
    else:
      lines = [ln for ln in proc.stderr.splitlines()
               if ln.startswith(('F', 'E')) and 'Check failed' in ln]
      entry.update({'error': 'process died', 'returncode': proc.returncode,
                    'message': (lines or proc.stderr.splitlines()[-1:]
                                or [''])[0][:1500]})
    print(case, entry.get('error', entry.get('equal')),
          entry.get('message', '')[:200], flush=True)
    data['cases'].append(entry)
  probe_report.write(data, args.out, args.name)


if __name__ == '__main__':
  main()
