r"""Ratio benchmarks of the patch series (issues #7, #24). Not timed tests.

Usage: python benchmarks/run.py [--quick] [--stock-python PY]
                                [--patched-python PY] [--only FIGURES]
                                [--profile]

Runs the workloads in `benchmarks/workloads/` in subprocesses, with a stock
and a patched jax 0.12.0.1 (by default venvs under `.venvs/`, made or reused
as needed: see `venvs.py`), and prints every figure as a ratio of two things
measured in the same run (medians over repeats), each with `goal met` or
`goal missed by X`:

1. speed       wall time per step, patched / stock (issue #24), of an
               elementwise grid kernel (<= 0.10), a blocked matmul with a
               VMEM accumulator (<= 0.25), the elementwise kernel with
               race detection (<= 0.25), a 2-core core_map with semaphores
               and DMAs (<= 0.5) and a 4-device ring of remote DMAs
               (<= 0.5); and against `interpret=True` where that runs
2. overhead    patched / stock, kernels using neither feature (<= 1.02
               each, geometric mean <= 1.01), and the io_callbacks each
               call runs, which must equal stock's
3. deadlock    deadlock detection on / off, 8 devices x 4 cores and 2 cores
               (<= 1.05)
4. polling     non-decrementing wait / wait + re-signal (<= 0.5), and the
               CPU a blocked wait burns
5. wakeup      signal -> return of a blocked wait, less the cost of
               measuring it (median < 0.5 ms)
6. collective  collective / private scratch on 4 cores (<= 1.1), one
               allocation of the shared table, checked against the buffers
               live at the barrier
7. memory      peak resident memory that a call with a large input adds,
               patched / stock (<= 0.6)
8. migration   status (< 0.3 s, no jax import), apply+revert (< 2 s), wheel

Stock/patched processes alternate (ABBA...) so that drift from other load on
the machine affects both alike. The workloads of CPU-time ratios run pinned
to one CPU; the wake-up workload runs on all of them. Times are CPU times of
the workload process (all threads; speed: wall time, issue #24's measure,
with the CPU-time ratio beside it): per process the fastest of its repeats,
then the median over processes; the medians of all calls (CPU and wall) are
printed beside them.
Every kernel's result is checked against numpy before it is timed.

`--profile` prints instead the io_callbacks per grid step of the patched
interpreter by the function they run (block copies, loads, stores, ...)
and the CPU time of each, for the elementwise and matmul kernels.

Nothing here asserts on time. Exit status: 0 when every figure was measured
(goals met or not), 3 when a figure could not be trusted (an independent
count in the same run disagrees, or it could not be measured), 1 when a
workload failed.
"""

import argparse
import json
import os
import pathlib
import platform
import shlex
import subprocess
import sys
import time

import figures
import venvs

HERE = pathlib.Path(__file__).resolve().parent
WORKLOADS = HERE / 'workloads'
RESULT_PREFIX = 'BENCH_RESULT '
FIGURES = ('speed', 'overhead', 'deadlock', 'polling', 'wakeup',
           'collective', 'memory', 'migration')

# Per size: processes (overhead: stock/patched pairs) and timed calls each.
PLAN = {
    'quick': dict(speed=(1, 5), overhead=(2, 10), deadlock=(1, 5),
                  polling=(1, 3), wakeup=(1, 2), collective=(1, 8),
                  memory=(1, 1), migration=(3, 1), profile=(1, 3)),
    'default': dict(speed=(3, 5), overhead=(10, 30), deadlock=(3, 15),
                    polling=(2, 5), wakeup=(1, 4), collective=(2, 20),
                    memory=(2, 1), migration=(7, 3), profile=(1, 5)),
}


def _log(message: str) -> None:
  print(f'[run] {message}', file=sys.stderr, flush=True)


def run_workload(python: str, script: str, *args: str,
                 cpu: int | None = None) -> dict:
  """Runs `python workloads/<script> *args`; returns its JSON result.

  Args:
    python: The interpreter of the venv to measure.
    script: A file of `workloads/`.
    *args: Its flags.
    cpu: If given, the process and all its threads run on this CPU only
      (`os.sched_setaffinity`).

  Returns:
    The JSON object the workload printed after `RESULT_PREFIX`.

  Raises:
    RuntimeError: The workload printed no result.
  """
  cmd = [python, str(WORKLOADS / script), *args]
  env = dict(os.environ, JAX_PLATFORMS='cpu', PYTHONUNBUFFERED='1')
  pin = None if cpu is None else lambda: os.sched_setaffinity(0, {cpu})
  start = time.perf_counter()
  proc = subprocess.run(cmd, cwd=venvs.ROOT, env=env, text=True,
                        capture_output=True, check=False, preexec_fn=pin)
  _log(f'{script} {" ".join(args)} with {python}: '
       f'{time.perf_counter() - start:.1f} s')
  for line in proc.stdout.splitlines():
    if line.startswith(RESULT_PREFIX):
      return json.loads(line[len(RESULT_PREFIX):])
  raise RuntimeError(
      f'{shlex.join(cmd)} exited with {proc.returncode} and no result:\n'
      f'{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}')


def machine() -> list[str]:
  """nproc, CPU model, load and versions, for the report."""
  model = 'unknown'
  try:
    with open('/proc/cpuinfo') as f:
      for line in f:
        if line.startswith('model name'):
          model = line.split(':', 1)[1].strip()
          break
  except OSError:
    pass
  load = ' '.join(f'{x:.2f}' for x in os.getloadavg())
  return [f'nproc {len(os.sched_getaffinity(0))}, CPU {model}, '
          f'load average {load}, {platform.system()} {platform.release()}']


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(
      description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  parser.add_argument('--quick', action='store_true',
                      help='fewer repeats and smaller loops (~1 minute)')
  for variant, state in venvs.WANTED_STATE.items():
    default = venvs.default_dir(variant).relative_to(venvs.ROOT)
    parser.add_argument(
        f'--{variant}-python',
        help=f'interpreter with {state} jax {venvs.JAX_VERSION} (default: '
        f'make or reuse {default})')
  parser.add_argument('--only', default=','.join(FIGURES),
                      help='comma-separated subset of ' + ','.join(FIGURES))
  parser.add_argument(
      '--profile', action='store_true',
      help='instead of the figures: io_callbacks per grid step by kind and '
      'their CPU time, elementwise and matmul kernels, patched jax')
  args = parser.parse_args(argv)
  only = args.only.split(',')
  if unknown := set(only) - set(FIGURES):
    parser.error(f'unknown figures {sorted(unknown)}; choose from {FIGURES}')
  size = 'quick' if args.quick else 'default'
  plan = PLAN[size]
  started = time.perf_counter()
  header = machine()

  stock = venvs.ensure('stock', args.stock_python)
  patched = venvs.ensure('patched', args.patched_python)
  header += [f'stock   {stock}: {venvs.describe(stock)}',
             f'patched {patched}: {venvs.describe(patched)}']

  # The CPU-time ratios are measured on one CPU: the interpreter's threads
  # (one per simulated core, and XLA's) then take turns instead of spreading
  # over CPUs as the scheduler happens to place them. Unpinned, the patched /
  # stock ratio of one pair of processes differed from the next pair's by up
  # to 40% (0.82..1.22, 2026-12-01).
  cpu = max(os.sched_getaffinity(0))
  if os.getloadavg()[0] > len(os.sched_getaffinity(0)):
    header.append('the load average exceeds the CPUs: other jobs are running, '
                  'and wall-time figures (speed) are less reliable than '
                  'CPU-time ones')
  header.append(f'speed, overhead, deadlock, polling, collective and memory '
                f'workloads run on CPU {cpu} only (sched_setaffinity); wake-up '
                'on all CPUs')

  def on_patched(script, key, pinned=True):
    processes, repeats = plan[key]
    return [run_workload(patched, script, '--repeats', str(repeats),
                         '--size', size, cpu=cpu if pinned else None)
            for _ in range(processes)]

  def alternating(script, key, *extra):
    """Stock and patched processes of `script`, alternating (ABBA)."""
    pairs, repeats = plan[key]
    results = {'stock': [], 'patched': []}
    for i in range(pairs):
      order = ('stock', 'patched') if i % 2 == 0 else ('patched', 'stock')
      for variant in order:
        python = stock if variant == 'stock' else patched
        results[variant].append(run_workload(
            python, script, '--repeats', str(repeats), *extra, cpu=cpu))
    return results['stock'], results['patched']

  figs = []
  if args.profile:
    only = []
    _, calls = plan['profile']
    figs.append(figures.callback_profile(run_workload(
        patched, 'per_step.py', '--profile', '--repeats', str(calls),
        '--size', size, '--kernels', 'elementwise,matmul', cpu=cpu)))
  if 'speed' in only:
    figs.append(figures.speed(*alternating('per_step.py', 'speed',
                                           '--size', size)))
  if 'overhead' in only:
    figs.append(figures.overhead(*alternating('overhead.py', 'overhead')))
  if 'deadlock' in only:
    figs.append(figures.deadlock_cost(on_patched('deadlock_cost.py',
                                                 'deadlock')))
  if 'polling' in only or 'wakeup' in only:
    polls = on_patched('poll.py', 'polling') if 'polling' in only else None
    wakes = on_patched('wake.py', 'wakeup', pinned=False)
    if polls is not None:
      figs += [figures.polling(polls), figures.blocked_cpu(wakes)]
    if 'wakeup' in only:
      figs.append(figures.wakeup(wakes))
  if 'collective' in only:
    figs.append(figures.collective(on_patched('collective.py', 'collective')))
  if 'memory' in only:
    figs.append(figures.memory(*alternating('memory.py', 'memory', '--size',
                                            size)))
  if 'migration' in only:
    repeats, trips = plan['migration']
    scratch = venvs.default_dir('scratch')
    figs.append(figures.migration_tool(run_workload(
        stock, 'migration_tool.py', '--repeats', str(repeats),
        '--round_trips', str(trips), '--scratch_dir', str(scratch))))

  print(f'Benchmarks of the patch series, jax {venvs.JAX_VERSION} '
        f'({size} run)')
  for line in header:
    print(f'  {line}')
  for number, fig in enumerate(figs, 1):
    print(f'\n{number}. {fig.title}')
    for line in fig.lines:
      print(f'   {line}')
  print('\nSummary')
  checks = [c for fig in figs for c in fig.checks]
  width = max(len(c.name) for c in checks) if checks else 0
  for c in checks:
    print(f'  {c.name:{width}s}  {c.value:>10s}  goal {c.goal:9s}  '
          f'{c.verdict}')
  print(f'\nTotal {time.perf_counter() - started:.0f} s; load average now '
        f'{" ".join(f"{x:.2f}" for x in os.getloadavg())}.')
  command = ['python', 'benchmarks/run.py'] + (['--quick'] if args.quick
                                               else [])
  if args.profile:
    command.append('--profile')
  elif args.only != ','.join(FIGURES):
    command += ['--only', args.only]
  print(f'Reproduce: {shlex.join(command)}  (from the repository root; '
        'add --stock-python/--patched-python to use existing venvs)')
  broken = [c.name for c in checks if c.broken]
  if broken:
    print(f'\nFigures that cannot be trusted: {", ".join(broken)}.')
    return 3
  return 0


if __name__ == '__main__':
  sys.exit(main())
