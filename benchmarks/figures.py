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
  interpreter must run no more steps than stock, whatever the timings say
  (fewer where the series' speed patches, #15 and #20, merge block copies).
  """
  fig = Figure('Overhead on kernels that use neither feature: patched / '
               f'stock CPU time per call (goal <= {goal} each, geometric '
               f'mean <= {mean_goal}; callbacks per call <= stock)')
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
    if len(s_cb) == 1 and len(p_cb) == 1 and max(p_cb) <= min(s_cb):
      fig.checks.append(Check(f'callbacks {name}', callbacks, '<= stock',
                              'goal met'))
    else:
      fig.checks.append(Check(
          f'callbacks {name}', callbacks, '<= stock',
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
      'stock:patched, counted exactly (the functions that run them '
      'wrapped: jax io_callback_impl, and the series\' '
      'interpret_callback_impl where the patched jax has it).')
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


def memory(stock: Sequence[Result], patched: Sequence[Result],
           goal: float = 0.6) -> Figure:
  """Peak resident memory of a call with a large input, patched / stock."""
  fig = Figure('Memory of a call with a large input in pl.ANY: increase of '
               'the peak resident memory, patched / stock (goal <= '
               f'{goal})')
  mib = 2**20
  size = stock[0]['input_bytes']
  if any(r['input_bytes'] != size for r in [*stock, *patched]):
    fig.checks.append(unmeasurable('memory, patched / stock', f'<= {goal}',
                                   'the runs had inputs of different sizes'))
    return fig
  rss, numpy_peak = {}, {}
  for name, results in (('stock', stock), ('patched', patched)):
    rss[name] = _median([r['rss_increase'] for r in results])
    numpy_peak[name] = _median([r['numpy_peak'] for r in results])
    fig.lines.append(
        f'{name:8s} peak RSS +{rss[name] / mib:7.0f} MiB '
        f'({rss[name] / size:.2f} x the input); NumPy memory held at once '
        f'{numpy_peak[name] / mib:7.0f} MiB ({numpy_peak[name] / size:.2f} x)')
  # Each interpreter holds the input's buffer in NumPy memory during the
  # call, and the process grows by at least that: less means the counts
  # missed it.
  if min(*numpy_peak.values(), *rss.values()) < size:
    fig.checks.append(unmeasurable(
        'memory, patched / stock', f'<= {goal}',
        'a run held less than its input in NumPy memory or resident memory'))
    return fig
  value = rss['patched'] / rss['stock']
  v = verdict(value, goal)
  fig.lines.append(f'patched / stock {value:.3f}  {v}')
  fig.lines.append(
      f'input {size / mib:.0f} MiB of bfloat16, one DMA of a sixth of it to '
      f'the output (test_large_array_indexing, scaled down); medians of '
      f'{len(stock)} process(es) each; RSS: ru_maxrss after the first call '
      '(compilation included) less before it; NumPy: tracemalloc during the '
      'second call.')
  fig.checks.append(Check('memory, patched / stock', f'{value:.3f}',
                          f'<= {goal}', v))
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


# Issue #24's goals: patched / stock wall time per call, per kernel of
# `workloads/per_step.py`.
SPEED_GOALS = {
    'elementwise': 0.10,
    'matmul': 0.25,
    'elementwise_races': 0.25,
    'core_map': 0.5,
    'ring': 0.5,
}
SPEED_KERNELS = {
    'elementwise': 'elementwise grid, (8, 128) f32 blocks',
    'matmul': 'blocked matmul, VMEM accumulator',
    'elementwise_races': 'elementwise, detect_races=True',
    'core_map': '2-core core_map, semaphores + DMAs',
    'ring': '4-device ring of remote DMAs',
}


def _speed_verdict(value: float, goal: float) -> str:
  if value <= goal:
    return 'goal met'
  return f'not met ({value / goal:.1f}x the goal)'


def speed(stock: Sequence[Result], patched: Sequence[Result]) -> Figure:
  """Per-step cost, patched against stock and the discharge interpreter.

  The ratio is of wall time per call (issue #24's measure), each side the
  fastest call of each process, median over the processes. A kernel's
  result was checked against numpy in its process before it was timed (a
  wrong result gives no figure: the workload fails).
  """
  steps = stock[0]['steps']
  fig = Figure('Speed of TPU interpret mode (issue #24): wall time per step, '
               'patched / stock (goals <= 0.10 / 0.25 / 0.25 / 0.5 / 0.5), '
               'and against interpret=True')
  fig.lines.append(
      f'{"kernel":18s} {"steps":>5s} {"stock ms":>8s} {"patched":>7s} '
      f'{"ratio":>6s} {"goal":>5s} {"cpu":>5s} {"per pair":>9s} '
      f'{"callbacks":>9s} {"discharge":>9s} {"x disch.":>8s}  verdict')
  notes = []
  for name, goal in SPEED_GOALS.items():
    label = f'per step {name}, patched / stock'
    if name not in steps or name not in stock[0]['wall']:
      fig.checks.append(unmeasurable(label, f'<= {goal}',
                                     'the workload did not run it'))
      continue
    n = steps[name]
    s_ms, p_ms = (1e3 * _best(r, 'wall', name) / n for r in (stock, patched))
    ratio_ = p_ms / s_ms
    cpu = _best(patched, 'cpu', name) / _best(stock, 'cpu', name)
    pairs = [min(p['wall'][name]) / min(s['wall'][name])
             for s, p in zip(stock, patched)]
    spread = f'{min(pairs):.2f}..{max(pairs):.2f}'
    s_cb = sorted({r['callbacks'][name] for r in stock})
    p_cb = sorted({r['callbacks'][name] for r in patched})
    cb = (f'{"/".join(f"{c / n:.1f}" for c in s_cb)}:'
          f'{"/".join(f"{c / n:.1f}" for c in p_cb)}')
    # The discharge interpreter is the same code in both venvs: its calls
    # from all processes are pooled. It has no race detection, so the races
    # kernel is compared with the plain elementwise kernel's discharge run.
    base = 'elementwise' if name == 'elementwise_races' else name
    d_name = f'{base}/discharge'
    everyone = [*stock, *patched]
    if d_name in stock[0]['wall']:
      d_ms = 1e3 * _median([min(r['wall'][d_name]) for r in everyone]) / n
      discharge, times = f'{d_ms:9.4f}', f'{p_ms / d_ms:7.0f}x'
      if base != name:
        notes.append(f'{name}: interpret=True has no race detection; its '
                     'figure is the plain elementwise kernel\'s.')
    else:
      error = stock[0]['discharge_error'].get(base, 'not run')
      discharge, times = f'{"-":>9s}', f'{"-":>8s}'
      notes.append(f'{name}: interpret=True does not run it: {error}')
    v = _speed_verdict(ratio_, goal)
    fig.lines.append(
        f'{name:18s} {n:5d} {s_ms:8.3f} {p_ms:7.3f} {ratio_:6.3f} '
        f'{goal:5.2f} {cpu:5.2f} {spread:>9s} {cb:>9s} {discharge} '
        f'{times}  {v}')
    fig.checks.append(Check(label, f'{ratio_:.3f}', f'<= {goal}', v))
  calls = len(stock[0]['wall']['elementwise'])
  fig.lines += [f'  {note}' for note in notes]
  fig.lines.append(
      f'{len(stock)} process(es) per venv, stock and patched alternating '
      f'(ABBA), {calls} timed calls of each kernel each, interleaved. ms: '
      'wall time per step (call / steps) of the fastest call of each '
      'process, median over the processes; ratio: patched / stock of it; '
      'cpu: the same ratio in CPU time (all threads); per pair: the ratio '
      'for each pair of processes (range). callbacks: io_callbacks per '
      'step, stock:patched. discharge: ms per step with interpret=True '
      '(all processes); x disch.: patched / discharge. Steps: grid points '
      '(elementwise, matmul), rounds of both cores (core_map), forwarding '
      'steps of each device (ring). Results checked against numpy first. '
      'Kernels: ' + '; '.join(f'{k}: {v}' for k, v in SPEED_KERNELS.items())
      + '.')
  return fig


# What the interpreter's io_callbacks do, by `per_step._callback_name`.
CALLBACK_KINDS = {
    'get[source_info]': 'kernel load',
    'swap[source_info]': 'kernel store (swap)',
    'get[input_name]': 'block copy in, read HBM',
    'store': 'block copy in, write VMEM',
    'get': 'block copy out, read VMEM; output',
    'store[output_name]': 'block copy out, write HBM',
    '_check_for_revisiting': 'revisiting check, per step',
    'copy_block[input_name]': 'block copy in',
    '_copy_input_blocks[grid_rank,inputs]': 'block copies in, per step',
    '_copy_output_blocks_and_check_for_revisiting[check_for_revisiting,'
    'memory_spaces,output_names]': 'block copies out, revisiting check',
    '_copy_output_blocks_and_check_for_revisiting[grid_rank,outputs]':
        'block copies out, revisiting check',
    '_copy_output_and_input_blocks[copy_inputs,copy_outputs,'
    'num_output_args]': 'block copies out, check, next in',
    '_allocate_buffer[collective,collective_group_size,padded_shape,'
    'source_info]': 'allocate',
    '_initialize_shared_memory[interpret_params,num_subcores]':
        '_initialize_shared_memory',
    '_update_clocks_for_device_barrier[cores_finished]':
        'device barrier clocks, cores done',
    '_update_clocks_for_device_barrier': 'device barrier clocks',
}


def callback_profile(result: Result) -> Figure:
  """The io_callbacks per step by kind and their CPU time, patched jax."""
  fig = Figure('Profile of TPU interpret mode, patched jax: io_callbacks per '
               'step by the interpreter function they run, and their CPU '
               'time')
  calls = result['calls']
  for name, profile in result['profile'].items():
    n = result['steps'][name] * calls
    cpu = profile['cpu']
    callbacks = profile['callbacks']
    impl_total = sum(p[1] for p in callbacks.values())
    count = sum(p[0] for p in callbacks.values())
    fig.lines.append(
        f'{name}: {1e6 * cpu / n:.0f} us CPU per step profiled '
        f'({1e6 * profile["cpu_bare"] / n:.0f} us without the profiler), '
        f'{count / n:.2f} callbacks per step, {1e6 * impl_total / n:.0f} us '
        'of it in the callbacks')
    fig.lines.append(
        f'  {"callback":34s} {"per step":>8s} {"us/call":>7s} '
        f'{"in fn":>6s} {"dev_put":>7s} {"us/step":>7s} {"share":>6s}')
    for kind, (k_calls, impl_s, fn_s, put_s) in sorted(
        callbacks.items(), key=lambda kv: -kv[1][1]):
      label = CALLBACK_KINDS.get(kind, kind)[:34]
      fig.lines.append(
          f'  {label:34s} {k_calls / n:8.2f} {1e6 * impl_s / k_calls:7.1f} '
          f'{1e6 * fn_s / k_calls:6.1f} {1e6 * put_s / k_calls:7.1f} '
          f'{1e6 * impl_s / n:7.1f} {100 * impl_s / cpu:5.1f}%')
    fn_total = sum(p[2] for p in callbacks.values())
    put_total = sum(p[3] for p in callbacks.values())
    rest = cpu - impl_total
    fig.lines.append(
        f'  {"all callbacks":34s} {count / n:8.2f} '
        f'{1e6 * impl_total / count:7.1f} {1e6 * fn_total / count:6.1f} '
        f'{1e6 * put_total / count:7.1f} {1e6 * impl_total / n:7.1f} '
        f'{100 * impl_total / cpu:5.1f}%')
    fig.lines.append(
        f'  {"outside the callbacks":34s} {"":8s} {"":7s} {"":6s} {"":7s} '
        f'{1e6 * rest / n:7.1f} {100 * rest / cpu:5.1f}%  (XLA: the kernel '
        'and entering/leaving each callback)')
  bare = result.get('bare_callbacks', {})
  if bare:
    fig.lines.append(
        'floor: a bare io_callback of a no-op in a jitted loop, '
        + ', '.join(f'{name.split("_")[1]} int32 scalar argument(s): '
                    f'{1e6 * t:.0f} us CPU' for name, t in sorted(bare.items()))
        + ' per callback (fastest of the calls)')
  fig.lines.append(
      f'{calls} calls per kernel after a warm one, one process, pinned. per '
      'step: callbacks of that kind per grid step; us/call: CPU time of the '
      'thread per call of the function that runs the callback (jax '
      'io_callback_impl: jax.device_put of the arguments, the function, '
      'np.asarray of the results; the series\' interpret_callback_impl: '
      'the same without jax.device_put); in fn: of which in the '
      'interpreter\'s function; dev_put: of which in jax.device_put; '
      'us/step: per grid step; share: of the process CPU time of the calls. '
      'A block copy is a get and a store; output blocks are copied out when '
      'their index changes, and once more at the end (output). Other rows: '
      'the interpreter function of that name, once per call or per device. '
      'Counted by wrapping jax._src.callback.io_callback_impl, the '
      'series\' interpret_utils.interpret_callback_impl and '
      'jax._src.api.device_put in the benchmark process.')
  return fig
