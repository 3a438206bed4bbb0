"""Coverage of upstream's hardware TPU Pallas tests by TPU interpret mode.

Runs upstream's TPU test files (``DEFAULT_FILES``) from a jax checkout on
CPU, as if on a chosen TPU, with every ``pallas_call`` interpreted: one
pytest process per file, with ``coverage_plugin`` (see there for how the
tests are made to see a TPU; upstream's files are never edited) and a
timeout per test. The plugin records each test's outcome and, for a
failure, the exception, the test file's statements in its traceback and
the test's source; this module classifies every test as

- ``passed``, ``skipped``;
- ``hardware-only``: the failure is a check of Mosaic's lowering or
  compilation, or of XLA:TPU outside the kernel (``HARDWARE_ONLY`` says
  which failures those are), not a gap of the interpreter;
- ``timed out``: the plugin's alarm stopped it, or it hung where a signal
  cannot reach it (inside XLA) and the process was killed ``GRACE_S``
  seconds later; the file's remaining tests then run in a new process;
- ``failed``, by cause: the exception's type and its message's first line,
  normalised (numbers and addresses replaced), so that tests that fail for
  one reason count together.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from migration import errors

# The simulated TPUs: --tpu NAME -> (device kind, TensorCores per device),
# as jax.devices() reports them on that TPU (jax/_src/tpu_info.py).
TPUS = {
    'v4': ('TPU v4', 2),
    'v5e': ('TPU v5 lite', 1),
    'v5p': ('TPU v5', 2),
    'v6e': ('TPU v6 lite', 1),
}
# --tpu chip: the machine's own TPU, not interpreted (what interpret mode is
# compared with: `against`).
CHIP = 'chip'
# Upstream's hardware TPU Pallas test files (relative to the checkout).
DEFAULT_FILES = tuple('tests/pallas/' + f for f in (
    'tpu_pallas_test.py', 'tpu_pallas_async_test.py',
    'tpu_pallas_state_test.py', 'tpu_pallas_distributed_test.py',
    'tpu_sparsecore_pallas_test.py', 'tpu_pallas_pipeline_test.py',
    'tpu_ops_test.py', 'tpu_pallas_memory_space_test.py',
    'tpu_pallas_random_test.py', 'tpu_paged_attention_kernel_test.py',
    'tpu_ragged_paged_attention_test.py',
    'tpu_splash_attention_kernel_test.py',
    'tpu_splash_attention_kernel_sharded_test.py',
    'tpu_splash_attention_mask_test.py', 'tpu_gmm_test.py'))
GRACE_S = 60
STARTUP_S = 300  # For pytest to import and collect a file.
STATUSES = ('passed', 'skipped', 'hardware-only', 'failed', 'timed out')
_PLUGIN = 'jax_fork_coverage_plugin'

# A failure is hardware-only when one of these holds: (reason, exception
# types, regex over the test method's source, regex over the failing
# statements and the message). An interpreter error while tracing (a
# NotImplementedError under `.lower(...)`) is a gap, unless the TPU does not
# compile the kernel either, and so is a wrong value.
_LOWERS = re.compile(r'\.lower\(|\.compile\(|as_text\(|compiler_ir\(|'
                     r'tpu_custom_call|mlir', re.I)
HARDWARE_ONLY = (
    ('checks the lowered or compiled kernel', ('AssertionError',), _LOWERS,
     re.compile(r'^(?![\s\S]*(Mismatched elements|Not equal to tolerance|'
                r'Arrays are not))')),
    ('expects a Mosaic compile error', ('AssertionError',), re.compile(''),
     re.compile(r'(not raised|does not match)[\s\S]*'
                r'(mosaic|lower|compil|mlir)|MosaicError not raised', re.I)),
    ('needs Mosaic', ('MosaicError', 'LoweringException'), re.compile(''),
     re.compile('')),
    # A regex over the compiled module's text finds no Mosaic kernel there.
    ('reads the compiled kernel', ('AttributeError',), _LOWERS,
     re.compile(r"'NoneType' object has no attribute 'group'")),
    # `pl.lower_as_mlir` lowers for a TPU, which the CPU backend refuses.
    ('lowers for a TPU', ('ValueError',), _LOWERS,
     re.compile('different from the lowering platform tpu')),
    # `debug=True` prints the Mosaic kernel, which interpret mode never has.
    ('reads the Mosaic kernel that debug=True prints', ('AssertionError',),
     re.compile(r'debug=True'), re.compile(r"not found in ''")),
    # Upstream's own interpret-mode run skips it, or expects it to pass where
    # the TPU fails (`only_passes_in_interpret`): what it expects is the TPU's
    # error. An error of another kind (`does not match`) is not this.
    ("expects the TPU's error (its source checks self.INTERPRET)",
     ('AssertionError',), re.compile(r'self\.INTERPRET\b'),
     re.compile(r'not raised')),
    # `pin` and `unpin` (jax._src.state.primitives) lower, outside the
    # kernel, to XLA:TPU's custom calls Pin and Unpin, which XLA:CPU lacks
    # ("No registered implementation for untyped custom call to Pin"); a
    # kernel's pinned input is a NotImplementedError with #55, a TypeError
    # without.
    ("pins a buffer with XLA:TPU's Pin and Unpin custom calls",
     ('TypeError', 'JaxRuntimeError', 'NotImplementedError'),
     re.compile(r'\bpin\('),
     re.compile(r'AbstractLinVal|custom call to (Un)?pin\b|'
                r'is a pinned buffer \(`pin`\)', re.I)),
    # It lowers a kernel with an int32 array in SEMAPHORE memory and reads
    # the text; the TPU v5e does not compile that kernel (XLA aborts, or
    # Mosaic rejects the window: hardware/probes/semaphore_memory_probe.py),
    # and interpret mode refuses it when it lowers it.
    ('lowers a kernel that the TPU does not compile (an int32 array in '
     'SEMAPHORE memory)', ('NotImplementedError',), _LOWERS,
     re.compile(r'in SEMAPHORE memory in TPU interpret mode')),
)
_CALLBACK = 'Traceback (most recent call last)'


@dataclasses.dataclass(frozen=True)
class Outcome:
  """One test's result: ``status`` of ``STATUSES`` and, unless passed or
  skipped, ``cause`` (a normalised exception, or why it is hardware-only)."""
  file: str
  test: str
  status: str
  cause: str = ''
  seconds: float = 0.0


def normalise(error: str, message: str) -> str:
  """``Type: first line of message``, numbers as N, addresses elided.

  For an error raised in a callback (XLA's message holds its traceback),
  the traceback's last line. A source file's path (the interpreter names the
  kernel's line) keeps only the file's name, so that one cause is one text
  wherever the checkout is.
  """
  lines = [s.strip() for s in message.splitlines() if s.strip()]
  if _CALLBACK in message:  # An error inside the interpreter's callback.
    error, lines = f'{error} in a callback', lines[-1:]
  line = re.sub(r'\b0x[0-9a-f]+', '<address>', lines[0] if lines else '')
  line = re.sub(r'(?<![\w.])/(?:[^\s:/]+/)*([^\s:/]+\.py)\b', r'\1', line)
  line = re.sub(r'\d+', 'N', line)
  return f'{error}: {line[:100]}' if line else error


def classify(records: list[dict]) -> tuple[str, str]:
  """The status and cause of one test from the plugin's records of it."""
  failures = [r for r in records if r['outcome'] == 'failed']
  if not failures:
    skipped = [r for r in records if r['outcome'] == 'skipped']
    return ('skipped', skipped[0].get('message', '')) if skipped else (
        'passed', '')
  first = failures[0]
  if first.get('error') in ('timeout', 'killed'):
    return 'timed out', first['message']
  text = '\n'.join(first.get('statements', []) + [first['message']])
  for reason, types, source, failure in HARDWARE_ONLY:
    if (first.get('error') in types and source.search(first.get('source', ''))
        and failure.search(text)):
      return 'hardware-only', reason
  return 'failed', normalise(first.get('error', 'error'), first['message'])


def _read(log: str) -> tuple[list[str], dict[str, list[dict]]]:
  started, records = [], collections.defaultdict(list)
  if os.path.exists(log):
    with open(log, encoding='utf-8') as f:
      for line in f:
        if not line.endswith('\n'):  # Being written.
          break
        record = json.loads(line)
        if 'start' in record:
          started.append(record['start'])
        else:
          records[record['nodeid']].append(record)
  return started, records


def _fail(log: str, test: str, error: str, message: str) -> None:
  """Records in the plugin's ``log`` that ``test`` failed with ``error``."""
  with open(log, 'a', encoding='utf-8') as f:
    f.write(json.dumps({'nodeid': test, 'when': 'call', 'outcome': 'failed',
                        'error': error, 'message': message}) + '\n')


def _exclude(exclude: str, started: list[str],
             env: dict[str, str]) -> set[str]:
  """Has the next run of the file skip the ``started`` tests; returns them."""
  with open(exclude, 'w', encoding='utf-8') as f:
    f.write('\n'.join(started))
  env['JAX_FORK_COVERAGE_EXCLUDE'] = exclude
  return set(started)


def _run_file(python: str, jax_repo: str, path: str, env: dict[str, str],
              args: list[str], timeout: float, grace: float,
              work: str) -> list[Outcome]:
  """Runs one test file, again without the tests reached after a kill or a
  crash."""
  log = os.path.join(work, 'log.jsonl')
  exclude = os.path.join(work, 'exclude')
  stderr_path = os.path.join(work, 'stderr')
  for p in (log, exclude):
    if os.path.exists(p):
      os.remove(p)
  env = dict(env, JAX_FORK_COVERAGE_LOG=log)
  excluded = set()
  while True:
    with open(stderr_path, 'w', encoding='utf-8') as stderr:
      proc = subprocess.Popen(  # pylint: disable=consider-using-with
          [python, '-m', 'pytest', '-p', _PLUGIN, '-p', 'no:cacheprovider',
           f'--rootdir={jax_repo}', '-q', *args, path], cwd=jax_repo,
          env=env, stdout=subprocess.DEVNULL, stderr=stderr,
          start_new_session=True)
    size, since = -1, time.monotonic()
    while proc.poll() is None:
      time.sleep(0.5)
      now = os.path.getsize(log) if os.path.exists(log) else 0
      if now != size:
        size, since = now, time.monotonic()
        continue
      started, records = _read(log)
      new = [t for t in started if t not in excluded]
      if time.monotonic() - since <= (timeout + grace if new else
                                      max(timeout + grace, STARTUP_S)):
        continue
      os.killpg(proc.pid, signal.SIGKILL)
      proc.wait()
      if not new:
        raise errors.EnvironmentProblem(
            f'pytest ran no test of {path} in {STARTUP_S} s with {python}.')
      if started[-1] not in records:
        _fail(log, started[-1], 'killed',
              f'hang: killed after {timeout + grace:g} s')
      excluded = _exclude(exclude, started, env)
      break
    else:
      started, records = _read(log)
      if proc.returncode not in (0, 1, 5) and not records:
        with open(stderr_path, encoding='utf-8', errors='replace') as f:
          stderr = f.read().strip()[-1500:]
        raise errors.EnvironmentProblem(
            f'pytest could not run {path} with {python} (exit code '
            f'{proc.returncode}): {stderr}')
      if (proc.returncode not in (0, 1, 5) and started
          and started[-1] not in records):
        # The process died in a test (e.g. SIGABRT from XLA): that test
        # failed, and the file runs again without the tests reached.
        code = proc.returncode
        try:
          died = f'signal {signal.Signals(-code).name}'
        except ValueError:
          died = f'exit code {code}'
        _fail(log, started[-1], 'crashed', f'the test process died ({died})')
        excluded = _exclude(exclude, started, env)
        continue
      return [Outcome(path, test, *classify(rs),
                      seconds=round(sum(r.get('duration', 0) for r in rs), 2))
              for test, rs in records.items()]


def run(jax_repo: str, python: str, tpu: str = 'v6e',
        files: tuple[str, ...] = DEFAULT_FILES, keyword: str | None = None,
        timeout: float = 60, devices: int = 4,
        grace: float = GRACE_S,
        only: set[str] | None = None) -> list[Outcome]:
  """Runs upstream's test ``files`` of ``jax_repo`` as if on TPU ``tpu``.

  Args:
    jax_repo: a jax checkout (its ``jax`` package is what runs).
    python: a Python with pytest and the jaxlib the checkout needs.
    tpu: a key of ``TPUS``, or ``CHIP`` to run the tests on this machine's
      TPU instead, compiled by Mosaic (``devices`` is then not used).
    files: test files, relative to ``jax_repo`` (a bare name: in
      ``tests/pallas``).
    keyword: pytest's ``-k`` expression, or None for every test.
    timeout: seconds each test may take.
    devices: the number of CPU devices (``JAX_NUM_CPU_DEVICES``), the chips
      the distributed tests see.
    grace: seconds after ``timeout`` before a test that the alarm did not
      stop is killed.
    only: if not None, the tests to run (``key_of_test``: a file's base name
      and the test's id in it, e.g. those that passed on a TPU), the
      others deselected; a file with none of them is not run.

  Returns:
    One ``Outcome`` per test, in the order run.

  Raises:
    errors.UsageError: an unknown ``tpu``, or a file that does not exist.
    errors.EnvironmentProblem: no ``python``, or pytest cannot run a file
      at all.
  """
  if tpu not in TPUS and tpu != CHIP:
    raise errors.UsageError(
        f'Unknown --tpu {tpu}; one of {", ".join(TPUS)}, {CHIP}.')
  files = tuple(f if os.sep in f else os.path.join('tests', 'pallas', f)
                for f in files)
  missing = [f for f in files if not os.path.isfile(os.path.join(jax_repo, f))]
  if missing:
    raise errors.UsageError(
        f'No {", ".join(missing)} in the jax checkout {jax_repo}.')
  found = shutil.which(python)
  if not found:
    raise errors.EnvironmentProblem(f'No Python {python} to run the tests.')
  python = os.path.abspath(found)
  work = tempfile.mkdtemp(prefix='jax-fork-coverage-')
  try:
    shutil.copy(os.path.join(os.path.dirname(__file__), 'coverage_plugin.py'),
                os.path.join(work, _PLUGIN + '.py'))
    # The checkout's jax first; a PYTHONPATH already set stays after it (on
    # a TPU machine it may name where jaxlib and libtpu are).
    path = [jax_repo, work] + [p for p in os.environ.get(
        'PYTHONPATH', '').split(os.pathsep) if p]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path),
               JAX_FORK_COVERAGE_TIMEOUT=f'{timeout:g}',
               PYTHONDONTWRITEBYTECODE='1')
    if tpu == CHIP:
      env['JAX_FORK_COVERAGE_TPU'] = CHIP
    else:
      kind, cores = TPUS[tpu]
      env.update(JAX_FORK_COVERAGE_TPU=f'{kind},{cores}',
                 JAX_NUM_CPU_DEVICES=str(devices))
    args = ['-k', keyword] if keyword else []
    if only is not None:
      files = tuple(f for f in files if any(
          t.startswith(os.path.basename(f) + '::') for t in only))
      with open(os.path.join(work, 'only'), 'w', encoding='utf-8') as f:
        f.write('\n'.join(sorted(only)))
      env['JAX_FORK_COVERAGE_ONLY'] = os.path.join(work, 'only')
    outcomes = []
    for path in files:
      outcomes += _run_file(python, jax_repo, path, env, args, timeout,
                            grace, work)
    return outcomes
  finally:
    shutil.rmtree(work, ignore_errors=True)


def file_rows(outcomes: list[Outcome]) -> list[dict]:
  """Per file: total, a count per status, and the pass rate in percent of
  the tests neither skipped nor hardware-only (None if there are none)."""
  rows = {}
  for o in outcomes:
    row = rows.setdefault(o.file, dict.fromkeys(('total',) + STATUSES, 0))
    row['total'] += 1
    row[o.status] += 1
  out = []
  for path, row in rows.items():
    counted = row['total'] - row['skipped'] - row['hardware-only']
    rate = round(100 * row['passed'] / counted, 1) if counted else None
    out.append({'file': path, **row, 'pass_rate': rate})
  return out


def cause_rows(outcomes: list[Outcome]) -> list[dict]:
  """Failures, timeouts and hardware-only tests grouped by cause, largest
  group first."""
  groups = collections.defaultdict(list)
  for o in outcomes:
    if o.status in ('failed', 'timed out', 'hardware-only'):
      groups[(o.status, o.cause)].append(o)
  return [{'status': s, 'cause': c, 'tests': len(g),
           'files': sorted({os.path.basename(o.file) for o in g}),
           'example': g[0].test}
          for (s, c), g in sorted(groups.items(), key=lambda i: -len(i[1]))]


def table_text(outcomes: list[Outcome]) -> str:
  """The per-file table, a total row, and the per-cause table."""
  rows = file_rows(outcomes)
  if len(rows) > 1:
    total = file_rows([dataclasses.replace(o, file='total')
                       for o in outcomes])
    rows += total
  head = ('file', 'total', 'passed', 'skipped', 'hw-only', 'failed',
          'timed out', 'pass rate')
  body = [(os.path.basename(r['file']), *(str(r[k]) for k in
           ('total',) + STATUSES),
           '-' if r['pass_rate'] is None else f'{r["pass_rate"]}%')
          for r in rows]
  widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
  lines = ['  '.join(x[i].ljust(widths[i]) if i == 0 else x[i].rjust(widths[i])
                     for i in range(len(head))) for x in [head, *body]]
  lines.append('pass rate: passed / (total - skipped - hardware-only)')
  causes = cause_rows(outcomes)
  if causes:
    lines += ['', 'tests  status         cause (files)']
    lines += [f'{c["tests"]:5}  {c["status"]:13}  {c["cause"]} '
              f'({", ".join(c["files"])})' for c in causes]
  return '\n'.join(lines)


def to_json(outcomes: list[Outcome], **info) -> dict:
  """The machine-readable report: ``info``, files, causes and tests."""
  return {**info, 'files': file_rows(outcomes), 'causes': cause_rows(outcomes),
          'tests': [dataclasses.asdict(o) for o in outcomes]}


def key_of_test(file: str, test: str) -> str:
  """A test as ``FILE_BASENAME::ID``: its file's base name and its id within
  the file (pytest's node ids begin with the file's path from wherever
  pytest's root was), as ``coverage_plugin`` selects tests."""
  return os.path.basename(file) + '::' + test.partition('::')[2]


def chip_passed(chip: dict) -> set[str]:
  """The tests (``key_of_test``) that passed in ``chip``, a ``--tpu chip``
  report: what ``--against`` runs."""
  return {key_of_test(t['file'], t['test']) for t in chip['tests']
          if t['status'] == 'passed'}


def against(outcomes: list[Outcome], chip: dict) -> list[dict]:
  """The tests that passed on a TPU and not here, per file.

  Args:
    outcomes: this run's outcomes (in TPU interpret mode).
    chip: the JSON report of a run with ``--tpu chip`` (``to_json``) of the
      same test files, on a TPU.

  Returns:
    Per file of ``chip`` with a test that passed there: ``file`` (its base
    name), ``passed_on_chip``, ``passed`` (of those, here), ``not_run``
    (those this run did not reach: another ``-k`` or files) and ``tests``:
    ``{test, status, cause}`` of each that ran here and did not pass.
  """
  here = {key_of_test(o.file, o.test): o for o in outcomes}
  rows = {}
  for t in chip['tests']:
    if t['status'] != 'passed':
      continue
    name = os.path.basename(t['file'])
    row = rows.setdefault(name, {'file': name, 'passed_on_chip': 0,
                                 'passed': 0, 'not_run': 0, 'tests': []})
    row['passed_on_chip'] += 1
    o = here.get(key_of_test(t['file'], t['test']))
    if o is None:
      row['not_run'] += 1
    elif o.status == 'passed':
      row['passed'] += 1
    else:
      row['tests'].append({'test': o.test, 'status': o.status,
                           'cause': o.cause})
  return list(rows.values())


def against_text(rows: list[dict], chip: dict) -> str:
  """``against``'s rows as text: a line per file, then its tests."""
  lines = [f'Against the TPU run of {chip.get("device_kind") or "a TPU"} '
           f'(jax {chip.get("jax_version") or "?"}): of the tests that '
           'passed there,']
  for row in rows:
    lines.append(f'{row["file"]}: {row["passed"]} of '
                 f'{row["passed_on_chip"]} pass here'
                 + (f' ({row["not_run"]} not run here)' if row['not_run']
                    else ''))
    lines += [f'  {t["status"]}: {t["test"]}: {t["cause"]}'
              for t in row['tests']]
  return '\n'.join(lines)


def device_info(python: str, jax_repo: str) -> dict:
  """The jax version and first device's kind that ``python`` sees with the
  checkout ``jax_repo`` first on its path (for the report of a chip run)."""
  path = [jax_repo] + [p for p in os.environ.get('PYTHONPATH', '').split(
      os.pathsep) if p]
  out = subprocess.run(
      [python, '-c', 'import jax; print(jax.__version__); '
       'print(jax.devices()[0].device_kind)'],
      capture_output=True, text=True, check=False,
      env=dict(os.environ, PYTHONPATH=os.pathsep.join(path)))
  lines = out.stdout.split('\n')
  if out.returncode or len(lines) < 2:
    raise errors.EnvironmentProblem(
        f'{python} could not import jax from {jax_repo}: '
        f'{out.stderr.strip()[-1000:]}')
  return {'jax_version': lines[0], 'device_kind': lines[1]}


def jax_commit(jax_repo: str) -> str | None:
  """The checkout's HEAD commit, ``+modified`` appended if tracked files
  differ from it (a stack applied with ``git apply``), or None if it is not
  the top of a git repository (a copy of a tag's files inside another
  repository has no commit of its own)."""
  top = subprocess.run(['git', '-C', jax_repo, 'rev-parse', '--show-toplevel'],
                       capture_output=True, text=True, check=False)
  if top.returncode or not os.path.samefile(top.stdout.strip(), jax_repo):
    return None  # Not a repository, or a folder inside another one.
  head = subprocess.run(['git', '-C', jax_repo, 'rev-parse', 'HEAD'],
                        capture_output=True, text=True, check=False)
  if head.returncode:
    return None
  status = subprocess.run(
      ['git', '-C', jax_repo, 'status', '--porcelain', '--untracked-files=no'],
      capture_output=True, text=True, check=False)
  return head.stdout.strip() + ('+modified' if status.stdout.strip() else '')


def default_python() -> str:
  """The Python that runs the tests unless --test_python says otherwise."""
  return sys.executable
