# Copyright 2026 The JAX Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     https://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

"""Turns the workloads' measurements into figures, each against its goal.

Every function takes the parsed JSON results of one workload (a list: one
per process) and returns a `Figure`: lines of text to print and the `Check`s
(one figure against one goal) that end up in the summary.
"""

from collections.abc import Sequence
import dataclasses
import statistics
from typing import Any

Result = dict[str, Any]


@dataclasses.dataclass
class Check:
  """One figure against its goal."""
  name: str
  value: str
  goal: str
  verdict: str


@dataclasses.dataclass
class Figure:
  """A numbered section of the report."""
  title: str
  lines: list[str] = dataclasses.field(default_factory=list)
  checks: list[Check] = dataclasses.field(default_factory=list)


def verdict(value: float, goal: float, unit: str = '',
            digits: int = 3) -> str:
  """`goal met` if `value <= goal`, else by how much it is missed."""
  if value <= goal:
    return 'goal met'
  return (f'goal missed by {value - goal:.{digits}f}{unit} '
          f'({100 * (value / goal - 1):.1f}% over)')


def _median(xs: Sequence[float]) -> float:
  return statistics.median(xs)


def _pooled(results: Sequence[Result], clock: str, name: str) -> list[float]:
  return [t for r in results for t in r[clock][name]]


def _best(results: Sequence[Result], clock: str, name: str) -> float:
  """Median over processes of each process's fastest call.

  The fastest of a process's repeats is its call least disturbed by other
  load on the machine (as `timeit` recommends); the median over processes
  then discards processes that ran under unusual load.

  Args:
    results: One result per process.
    clock: 'cpu' or 'wall'.
    name: The timed function.

  Returns:
    Seconds.
  """
  return _median([min(r[clock][name]) for r in results])


ESTIMATOR = ('CPU time (all threads, time.process_time) of the fastest call '
             'of each process, median over the processes')


def overhead(stock: Sequence[Result], patched: Sequence[Result],
             goal: float = 1.02) -> Figure:
  """Patched / stock time of kernels that use none of the features."""
  fig = Figure('Overhead on kernels that use neither feature: patched / '
               f'stock CPU time per call (goal <= {goal})')
  fig.lines.append(
      f'{"kernel":20s} {"stock ms":>8s} {"patched":>7s} {"ratio":>6s} '
      f'{"per pair":>11s} {"medians":>7s} {"wall":>5s}  verdict')
  ratios = []
  for name in stock[0]['cpu']:
    s_ms = 1e3 * _best(stock, 'cpu', name)
    p_ms = 1e3 * _best(patched, 'cpu', name)
    ratio = p_ms / s_ms
    ratios.append(ratio)
    medians = (_median(_pooled(patched, 'cpu', name))
               / _median(_pooled(stock, 'cpu', name)))
    wall = (_median(_pooled(patched, 'wall', name))
            / _median(_pooled(stock, 'wall', name)))
    pairs = [min(p['cpu'][name]) / min(s['cpu'][name])
             for s, p in zip(stock, patched)]
    spread = f'{min(pairs):.2f}..{max(pairs):.2f}'
    v = verdict(ratio, goal)
    fig.lines.append(f'{name:20s} {s_ms:8.2f} {p_ms:7.2f} {ratio:6.3f} '
                     f'{spread:>11s} {medians:7.3f} {wall:5.2f}  {v}')
    fig.checks.append(Check(f'overhead {name}', f'{ratio:.3f}',
                            f'<= {goal}', v))
  geomean = statistics.geometric_mean(ratios)
  fig.lines.append(f'{"geometric mean":20s} {"":8s} {"":7s} {geomean:6.3f}')
  n = len(stock[0]['cpu'][name])
  fig.lines.append(
      f'{len(stock)} processes per venv, stock and patched alternating '
      f'(ABBA), {n} timed calls each. ms, ratio: {ESTIMATOR}. per pair: '
      'the same ratio for each pair of processes (range). medians, wall: '
      'ratio of the medians of all calls, CPU and wall time (noisier: other '
      'jobs share the machine).')
  return fig


def polling(results: Sequence[Result], goal: float = 0.6) -> Figure:
  """Non-decrementing wait / wait-and-re-signal, per poll."""
  n = results[0]['n']
  fig = Figure('Polling loop, patched jax: non-decrementing wait / '
               'decrementing wait + re-signal, CPU time per poll '
               f'(goal <= {goal})')
  fig.lines.append(f'{"cores":5s} {"non-decr. us":>12s} {"workaround us":>13s} '
                   f'{"ratio":>6s} {"medians":>7s}  verdict')

  def per_poll(estimate, variant, cores):
    return (estimate(f'{variant}_{cores}c_n{n}')
            - estimate(f'{variant}_{cores}c_n0')) / n

  best = lambda name: _best(results, 'cpu', name)
  med = lambda name: _median(_pooled(results, 'cpu', name))
  for cores in (1, 4):
    wait, workaround = (per_poll(best, v, cores)
                        for v in ('nondecrementing', 'workaround'))
    ratio = wait / workaround
    medians = (per_poll(med, 'nondecrementing', cores)
               / per_poll(med, 'workaround', cores))
    v = verdict(ratio, goal)
    fig.lines.append(f'{cores:5d} {1e6 * wait:12.1f} {1e6 * workaround:13.1f} '
                     f'{ratio:6.3f} {medians:7.3f}  {v}')
    fig.checks.append(Check(f'polling, {cores} core(s)', f'{ratio:.3f}',
                            f'<= {goal}', v))
    signal = per_poll(best, 'signal_only', cores)
    fig.lines.append(
        f'{"":5s} a signal alone: {1e6 * signal:.1f} us per iteration, so '
        f'one callback instead of two predicts {wait / (wait + signal):.3f}')
  calls = len(results[0]['cpu'][f'signal_only_1c_n{n}'])
  fig.lines.append(
      f'Per poll: (t({n} polls) - t(0 polls)) / {n}, t: {ESTIMATOR} '
      f'({len(results)} process(es), {calls} calls each); medians: the same '
      'from the medians of all calls. On 4 cores all 4 cores poll at once '
      '(CPU of all of them).')
  return fig


def blocked_cpu(results: Sequence[Result], goal: float = 0.05) -> Figure:
  """CPU seconds burnt per second a core is blocked in a wait."""
  fig = Figure('CPU use while blocked, patched jax: process CPU s per s of '
               f'blocking, core 0 waits for core 1 (goal <= {goal})')
  for variant in ('nondecrementing', 'decrementing'):
    samples = [(c, w, s) for r in results
               for c, w, s in zip(r['blocked'][variant]['cpu_s'],
                                  r['blocked'][variant]['wall_s'],
                                  r['blocked'][variant]['sleep_s'])]
    long_s = max(s for _, _, s in samples)
    short_s = min(s for _, _, s in samples)
    cpu = {x: _median([c for c, _, s in samples if s == x])
           for x in (short_s, long_s)}
    wall = {x: _median([w for _, w, s in samples if s == x])
            for x in (short_s, long_s)}
    rate = (cpu[long_s] - cpu[short_s]) / (wall[long_s] - wall[short_s])
    rate = max(rate, 0.0)
    line = (f'{variant:16s} {rate:.4f} CPU s/s blocked; whole call with a '
            f'{long_s:g} s block: {cpu[long_s]:.3f} CPU s in '
            f'{wall[long_s]:.3f} s wall')
    if variant == 'nondecrementing':
      v = verdict(rate, goal, digits=4)
      fig.lines.append(f'{line}  {v}')
      fig.checks.append(Check('CPU while blocked', f'{rate:.4f} s/s',
                              f'<= {goal}', v))
    else:
      fig.lines.append(f'{line}  (reference)')
  fig.lines.append(
      f'(CPU(long) - CPU(short)) / (wall(long) - wall(short)) with blocks of '
      f'{short_s:g} s and {long_s:g} s, getrusage of the whole process.')
  return fig


def wakeup(results: Sequence[Result], goal_ms: float = 1.0) -> Figure:
  """Signal on core 1 to the return of a blocked wait on core 0."""
  fig = Figure('Wake-up latency, patched jax: signal on core 1 -> return of '
               f'the non-decrementing wait blocked on core 0 (goal: median '
               f'< {goal_ms:g} ms)')
  latency = [t for r in results for t in r['wakeup']['latency_s']]
  baseline = [t for r in results for t in r['wakeup']['baseline_s']]
  inside = [t for r in results for t in r['wakeup']['interpreter_s']]
  not_blocked = sum(r['wakeup']['not_blocked'] for r in results)

  def describe(xs):
    q = statistics.quantiles(xs, n=10)
    return (f'median {1e3 * _median(xs):.3f} ms, p10 {1e3 * q[0]:.3f} ms, '
            f'p90 {1e3 * q[-1]:.3f} ms')

  med = 1e3 * _median(latency)
  v = verdict(med, goal_ms, ' ms')
  med_inside = 1e3 * _median(inside)
  v_inside = verdict(med_inside, goal_ms, ' ms')
  fig.lines += [
      f'kernel callbacks   {describe(latency)}  {v}',
      f'  no blocking      {describe(baseline)} (same stamps, signal and '
      'wait on 1 core that never blocks: the cost of measuring)',
      f'inside interpreter {describe(inside)}  {v_inside}',
      f'{len(latency)} signals ({not_blocked} left out: core 0 not yet '
      'waiting). Kernel callbacks: io_callback stamp before the signal -> '
      'stamp after a semaphore_read that follows the wait. Inside '
      'interpreter: entering Semaphore.signal -> leaving Semaphore.wait.',
  ]
  fig.checks += [
      Check('wake-up, kernel callbacks', f'{med:.3f} ms', f'< {goal_ms:g} ms',
            v),
      Check('wake-up, inside interpreter', f'{med_inside:.3f} ms',
            f'< {goal_ms:g} ms', v_inside),
  ]
  return fig


def collective(results: Sequence[Result], goal: float = 1.1) -> Figure:
  """Collective scratch / private scratch plus copies, on 4 cores."""
  fig = Figure('Collective vs private scratch, 4 cores, patched jax: CPU '
               f'time collective / private (goal <= {goal}); allocations of '
               'the shared table (goal: 1)')
  alloc = results[0]['allocations']
  table_kib = results[0]['table_bytes'] / 1024
  fig.lines.append(f'{"table":9s} {"private ms":>10s} {"collective":>10s} '
                   f'{"ratio":>6s} {"medians":>7s} {"wall":>5s}  verdict')
  for scenario in ('copy', 'computed'):
    c_ms, p_ms = (1e3 * _best(results, 'cpu', f'{k}_{scenario}')
                  for k in ('collective', 'private'))
    ratio = c_ms / p_ms
    medians, wall = (
        _median(_pooled(results, clock, f'collective_{scenario}'))
        / _median(_pooled(results, clock, f'private_{scenario}'))
        for clock in ('cpu', 'wall'))
    v = verdict(ratio, goal)
    fig.lines.append(f'{scenario:9s} {p_ms:10.2f} {c_ms:10.2f} {ratio:6.3f} '
                     f'{medians:7.3f} {wall:5.2f}  {v}')
    fig.checks.append(Check(f'collective / private, {scenario}',
                            f'{ratio:.3f}', f'<= {goal}', v))
  for name in ('collective_copy', 'private_copy', 'private_computed'):
    count, size = alloc[name].get('vmem_table', (0, 0))
    vmem_count, vmem_size = alloc[name].get('vmem', (0, 0))
    fig.lines.append(
        f'{name:19s} table buffers: {count} ({size / 1024:.0f} KiB); all '
        f'VMEM per call: {vmem_count} buffers, {vmem_size / 1024:.0f} KiB')
  count = alloc['collective_copy'].get('vmem_table', (0, 0))[0]
  av = 'goal met' if count == 1 else f'goal missed: {count} allocations'
  fig.lines.append(f'shared table ({table_kib:.0f} KiB) allocated {count} '
                   f'time(s) per call  {av}')
  fig.checks.append(Check('collective table allocations', str(count), '1',
                          av))
  n = len(results[0]['cpu']['collective_copy'])
  fig.lines.append(
      f'ms, ratio: {ESTIMATOR} ({len(results)} process(es), {n} calls each, '
      'interleaved); medians, wall: ratio of the medians of all calls. copy: '
      'the table is in HBM (private: each core copies all of it; '
      'collective: a quarter each, then a non-decrementing wait). computed: '
      'each core normalizes a quarter (private: through HBM with 4 signals '
      'per core, then a full copy). Allocations: wrapped '
      'SharedMemory.allocate_buffer.')
  return fig


def migration_tool(result: Result, status_goal: float = 0.3,
                   round_trip_goal: float = 2.0) -> Figure:
  """The migration tool's wall times on a scratch venv."""
  fig = Figure('Migration tool on a scratch venv (pristine jax wheel, '
               'pip install --no-deps)')
  startup = _median(result['startup_s'])
  status = _median(result['status_s'])
  v = verdict(status, status_goal, ' s')
  cpu = _median(result['status_cpu_s'])
  fig.lines.append(f'status        {1e3 * status:7.1f} ms wall, '
                   f'{1e3 * cpu:.0f} ms CPU (python -c pass: '
                   f'{1e3 * startup:.1f} ms; goal < {status_goal} s)  {v}')
  slowest = ', '.join(f'{name} {1e3 * t:.0f}'
                      for name, t in result['slowest_imports'])
  fig.lines.append(f'              importing migration.cli: '
                   f'{1e3 * result["cli_import_s"]:.0f} ms, of which '
                   f'(ms) {slowest}')
  fig.checks.append(Check('migration status', f'{1e3 * status:.0f} ms',
                          f'< {status_goal} s', v))
  mods = result['jax_modules']
  jv = ('goal met' if not mods else
        f'goal missed: imports {", ".join(mods[:5])}')
  fig.lines.append(f'status imports {len(mods)} jax/jaxlib module(s) '
                   f'(-X importtime; goal 0)  {jv}')
  fig.checks.append(Check('status imports jax', str(len(mods)), '0', jv))
  trips = [a + r for a, r in zip(result['apply_s'], result['revert_s'])]
  trip = _median(trips)
  v = verdict(trip, round_trip_goal, ' s')
  fig.lines.append(
      f'apply+revert  {trip:7.3f} s (apply {_median(result["apply_s"]):.3f} '
      f's, revert {_median(result["revert_s"]):.3f} s; goal < '
      f'{round_trip_goal} s; {len(trips)} round trip(s), pristine after '
      f'each)  {v}')
  fig.checks.append(Check('apply+revert round trip', f'{trip:.2f} s',
                          f'< {round_trip_goal} s', v))
  wheel = result['wheel']
  if wheel is None:
    fig.lines.append('wheel         skipped: python -m migration wheel does '
                     'not exist yet')
  elif wheel['exit_code'] == 0:
    fig.lines.append(f'wheel         {wheel["s"]:7.3f} s (no goal set), '
                     f'built {", ".join(wheel["built"])}')
  else:
    fig.lines.append(f'wheel         failed with exit code '
                     f'{wheel["exit_code"]}: {wheel["output"].strip()}')
  fig.lines.append(f'Medians of {len(result["status_s"])} runs of status.')
  return fig
