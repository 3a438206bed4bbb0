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
  """One figure against its goal.

  `broken` is set when the figure cannot be trusted: an independent count in
  the same run disagrees with it, or it could not be measured. `run.py`
  then exits with status 3 (a missed goal alone does not change the exit
  status).
  """
  name: str
  value: str
  goal: str
  verdict: str
  broken: bool = False


def unmeasurable(name: str, goal: str, why: str) -> Check:
  """A figure that could not be measured: says why instead of a number."""
  return Check(name, 'n/a', goal, f'NOT MEASURED: {why}', broken=True)


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


@dataclasses.dataclass(frozen=True)
class Ratio:
  """Function `a` against function `b` of the same processes."""
  a_ms: float  # ESTIMATOR of `a`, in ms.
  b_ms: float
  ratio: float  # a_ms / b_ms
  medians: float  # The same from the medians of all calls, CPU time.
  wall: float  # The same from the medians of all calls, wall time.


def ratio(results: Sequence[Result], a: str, b: str) -> Ratio:
  """Compares two functions timed in the same processes."""
  a_ms, b_ms = (1e3 * _best(results, 'cpu', name) for name in (a, b))
  medians, wall = (_median(_pooled(results, clock, a))
                   / _median(_pooled(results, clock, b))
                   for clock in ('cpu', 'wall'))
  return Ratio(a_ms, b_ms, a_ms / b_ms, medians, wall)


ESTIMATOR = ('CPU time (all threads, time.process_time) of the fastest call '
             'of each process, median over the processes')


def overhead(stock: Sequence[Result], patched: Sequence[Result],
             goal: float = 1.02, mean_goal: float = 1.01) -> Figure:
  """Patched / stock time of kernels that use none of the features.

  Beside the times, the io_callbacks (interpreter steps) one call runs are
  counted exactly in both venvs: with no feature used, the patched
  interpreter must run the same steps as stock, whatever the timings say.
  """
  fig = Figure('Overhead on kernels that use neither feature: patched / '
               f'stock CPU time per call (goal <= {goal} each, geometric '
               f'mean <= {mean_goal}; callbacks per call equal)')
  fig.lines.append(
      f'{"kernel":20s} {"stock ms":>8s} {"patched":>7s} {"ratio":>6s} '
      f'{"per pair":>11s} {"medians":>7s} {"wall":>5s} {"callbacks":>9s}  '
      'verdict')
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
    s_cb = {r['callbacks'][name] for r in stock}
    p_cb = {r['callbacks'][name] for r in patched}
    callbacks = f'{"/".join(map(str, s_cb))}:{"/".join(map(str, p_cb))}'
    fig.lines.append(f'{name:20s} {s_ms:8.2f} {p_ms:7.2f} {ratio:6.3f} '
                     f'{spread:>11s} {medians:7.3f} {wall:5.2f} '
                     f'{callbacks:>9s}  {v}')
    fig.checks.append(Check(f'overhead {name}', f'{ratio:.3f}',
                            f'<= {goal}', v))
    if len(s_cb) == 1 and s_cb == p_cb:
      fig.checks.append(Check(f'callbacks {name}', f'{p_cb.pop()}',
                              'as stock', 'goal met'))
    else:
      fig.checks.append(Check(
          f'callbacks {name}', callbacks, 'as stock',
          f'goal missed: stock {sorted(s_cb)}, patched {sorted(p_cb)}'))
  geomean = statistics.geometric_mean(ratios)
  v = verdict(geomean, mean_goal)
  fig.lines.append(f'{"geometric mean":20s} {"":8s} {"":7s} {geomean:6.3f}'
                   f'{"":33s}{v}')
  fig.checks.append(Check('overhead geometric mean', f'{geomean:.3f}',
                          f'<= {mean_goal}', v))
  n = len(stock[0]['cpu'][name])
  fig.lines.append(
      f'{len(stock)} processes per venv, stock and patched alternating '
      f'(ABBA), {n} timed calls each. ms, ratio: {ESTIMATOR}. per pair: '
      'the same ratio for each pair of processes (range). medians, wall: '
      'ratio of the medians of all calls, CPU and wall time (noisier: other '
      'jobs share the machine). callbacks: io_callbacks one call runs, '
      'stock:patched, counted exactly (jax io_callback_impl wrapped).')
  fig.lines.append(
      'sparsecore_gather runs on a 1 x 1 SparseCore mesh: stock interpret '
      'mode runs only subcore 0 of a SparseCore mesh (patch 0007 runs every '
      'subcore), so on a larger mesh stock and patched would do different '
      'work.')
  return fig


def deadlock_cost(results: Sequence[Result], goal: float = 1.05) -> Figure:
  """Deadlock detection on / off, patched jax, same process."""
  fig = Figure('Deadlock detection, patched jax: CPU time with '
               'detect_deadlocks=True / False (goal <= '
               f'{goal})')
  fig.lines.append(f'{"kernel":12s} {"off ms":>8s} {"on ms":>8s} '
                   f'{"ratio":>6s} {"medians":>7s} {"wall":>5s} '
                   f'{"callbacks":>9s}  verdict')
  for name in ('mesh_8x4', 'core_map_2'):
    r = ratio(results, f'{name}_on', f'{name}_off')
    cb = {res['callbacks'][f'{name}_{s}']
          for res in results for s in ('on', 'off')}
    v = verdict(r.ratio, goal)
    fig.lines.append(f'{name:12s} {r.b_ms:8.2f} {r.a_ms:8.2f} {r.ratio:6.3f} '
                     f'{r.medians:7.3f} {r.wall:5.2f} '
                     f'{"/".join(map(str, sorted(cb))):>9s}  {v}')
    fig.checks.append(Check(f'deadlock detection on/off, {name}',
                            f'{r.ratio:.3f}', f'<= {goal}', v))
    if len(cb) != 1:
      fig.checks.append(Check(
          f'callbacks {name} on = off', '/'.join(map(str, sorted(cb))),
          'equal', 'goal missed: detection changed the steps run'))
  n = len(results[0]['cpu']['mesh_8x4_on'])
  fig.lines.append(
      f'mesh_8x4: 8 devices x 4 cores, every core signals a neighbour core '
      f'and a neighbour device and waits for both, every round; core_map_2: '
      f'the 2-core kernel of figure 1. ms, ratio: {ESTIMATOR} '
      f'({len(results)} process(es), {n} calls each, on and off '
      'interleaved). callbacks: io_callbacks per call, on and off (equal: '
      'detection adds no callback).')
  return fig


def polling(results: Sequence[Result], goal: float = 0.5) -> Figure:
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


def wakeup(results: Sequence[Result], goal_ms: float = 0.5) -> Figure:
  """Signal on core 1 to the return of a blocked wait on core 0."""
  fig = Figure('Wake-up latency, patched jax: signal on core 1 -> return of '
               f'the non-decrementing wait blocked on core 0 (goal: median '
               f'< {goal_ms:g} ms, the kernel-callback figure after '
               'subtracting the cost of measuring)')
  latency = [t for r in results for t in r['wakeup']['latency_s']]
  baseline = [t for r in results for t in r['wakeup']['baseline_s']]
  inside = [t for r in results for t in r['wakeup']['interpreter_s']]
  not_blocked = sum(r['wakeup']['not_blocked'] for r in results)

  def describe(xs):
    q = statistics.quantiles(xs, n=10)
    return (f'median {1e3 * _median(xs):.3f} ms, p10 {1e3 * q[0]:.3f} ms, '
            f'p90 {1e3 * q[-1]:.3f} ms')

  med = 1e3 * _median(latency)
  cost = 1e3 * _median(baseline)
  net = med - cost
  v = verdict(net, goal_ms, ' ms')
  med_inside = 1e3 * _median(inside)
  v_inside = verdict(med_inside, goal_ms, ' ms')
  fig.lines += [
      f'kernel callbacks   {describe(latency)}',
      f'  no blocking      {describe(baseline)} (same stamps, signal and '
      'wait on 1 core that never blocks: the cost of measuring)',
      f'  difference       median {net:.3f} ms  {v}',
      f'inside interpreter {describe(inside)}  {v_inside}',
      f'{len(latency)} signals ({not_blocked} left out: core 0 not yet '
      'waiting). Kernel callbacks: io_callback stamp before the signal -> '
      'stamp after a semaphore_read that follows the wait. Inside '
      'interpreter: entering Semaphore.signal -> leaving Semaphore.wait.',
  ]
  fig.checks += [
      Check('wake-up, kernel callbacks - cost', f'{net:.3f} ms',
            f'< {goal_ms:g} ms', v),
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
    r = ratio(results, f'collective_{scenario}', f'private_{scenario}')
    v = verdict(r.ratio, goal)
    fig.lines.append(f'{scenario:9s} {r.b_ms:10.2f} {r.a_ms:10.2f} '
                     f'{r.ratio:6.3f} {r.medians:7.3f} {r.wall:5.2f}  {v}')
    fig.checks.append(Check(f'collective / private, {scenario}',
                            f'{r.ratio:.3f}', f'<= {goal}', v))
  callbacks = results[0].get('callbacks', {})
  copy_check = fig.checks[0]
  extra = (callbacks.get('collective_copy', 0)
           - callbacks.get('private_copy', 0))
  if copy_check.verdict != 'goal met' and extra > 0:
    r = ratio(results, 'collective_copy', 'private_copy')
    fig.lines.append(
        f'copy floor: the collective kernel runs {extra} more interpreter '
        f'callbacks per call than the private one ('
        f'{callbacks["collective_copy"]} vs {callbacks["private_copy"]}: '
        'the scope\'s allocations, signals and waits), '
        f'{(r.a_ms - r.b_ms) / extra:.3f} ms each, while the 3 table copies it '
        'saves are memcpys of microseconds; in interpret mode sharing a '
        'table that is only copied cannot be cheaper than copying it.')
    copy_check.verdict += ' (floor explained above)'
  for name in ('collective_copy', 'collective_computed', 'private_copy',
               'private_computed'):
    count, size = alloc[name].get('vmem_table', (0, 0))
    vmem_count, vmem_size = alloc[name].get('vmem', (0, 0))
    live = results[0]['live_at_barrier'][name]
    expected = results[0]['expected_live'][name]
    fig.lines.append(
        f'{name:19s} table buffers: {count} ({size / 1024:.0f} KiB), live at '
        f'the barrier: {live if live else "no barrier"}; all VMEM per call: '
        f'{vmem_count} buffers, {vmem_size / 1024:.0f} KiB')
    if expected is not None and (len(live) != 4 or set(live) != {count}
                                 or count != expected):
      fig.checks.append(Check(
          f'{name} table count', str(count), f'{expected} (live {live})',
          'COUNTS DISAGREE: allocations, live buffers at the barrier and the '
          'kernel\'s design do not match', broken=True))
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
      'per core, then a full copy). Allocations: Buffer objects the '
      'interpreter created in one call; live at the barrier: table buffers in '
      'its memory, read by each core after the barrier (an io_callback).')
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
