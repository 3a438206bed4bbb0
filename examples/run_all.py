"""Runs the examples in this directory with this Python; summarizes them.

Usage: python examples/run_all.py [--timeout SECONDS] [--jobs N] [NAME ...]

Each example runs in its own process, several at once. It is `ok` if it
exits 0, `MISMATCH` if it exits non-zero after printing MISMATCH as its last
line (a result differs from its independent check), `FAILED` otherwise (an
error, or still running after the timeout). It is `skipped`, with the
reason, if the patch series that patches/manifest.json serves for this jax
lacks a patch it needs, or if this jax lacks the public API it uses (NEEDS
below). Exits 0 if every example was ok or skipped.
"""
import argparse
import concurrent.futures
import importlib.metadata
import json
import multiprocessing
import os
import pathlib
import re
import runpy
import sys
import tempfile
import time
import traceback

HERE = pathlib.Path(__file__).resolve().parent
# Each example runs in a process of its own (each sets up its own simulated
# devices), forked from one that has imported jax but not started it: that
# saves each example the 2 s of importing jax.
_FORKS = multiprocessing.get_context('forkserver')
_FORKS.set_forkserver_preload(['jax', 'jax.experimental.pallas.tpu'])
MANIFEST = HERE.parent / 'patches' / 'manifest.json'

# Per example: the patches it needs, by a part of their subject in the
# manifest, and the public API it uses that older jax lacks, if any.
_WAIT = 'allow non-decrementing semaphore waits'
_READ = 'support `pl.semaphore_read`'
_SCOPE = 'allow `run_scoped` with `collective_axes`'
_DEVICE_KIND = 'add `InterpretParams.device_kind`'
_MESH = ((0, 11), 'pltpu.TensorCoreMesh')
_NONE = ((), '')
NEEDS = {
    'collective_scope_cores': ([_WAIT, _READ, _SCOPE], _MESH),
    'collective_scope_shard_map': ([_SCOPE], _MESH),
    'deadlock_detection': (['detect deadlocks'], _NONE),
    'emit_pipeline_device_kind': (
        [_DEVICE_KIND, 'run the `emit_pipeline` primitive'], _NONE),
    'nondecrementing_wait': ([_WAIT, _READ], _MESH),
    'prng_dropout': (['implement `pltpu.prng_seed`'], _NONE),
    'race_detection': ([], ((0, 12), 'InterpretParams(on_race=...)')),
    'ref_views_dma': (['support `ref.reshape` and `ref.bitcast`'], _NONE),
    'ring_all_gather': ([_WAIT, _READ], _NONE),
    'sparsecore_gather': (
        ['run every subcore of a SparseCore mesh', _DEVICE_KIND], _NONE),
    'stochastic_round': (['run `pltpu.stochastic_round`'], _NONE),
}


def examples() -> list[str]:
  return sorted(p.stem for p in HERE.glob('*.py') if p.name != 'run_all.py')


def skip_reasons() -> dict[str, str]:
  """Returns why this jax cannot run an example, for those it cannot run."""
  version = importlib.metadata.version('jax').split('+')[0]
  release = tuple(int(n) for n in re.findall(r'\d+', version))
  subjects = None  # None: a release the manifest does not serve.
  if MANIFEST.exists():
    for name, series in json.loads(MANIFEST.read_text())['series'].items():
      if version in series['versions']:
        subjects = [p['subject'] for p in series['patches']]
        break
  reasons = {}
  for example, (patches, (oldest, api)) in NEEDS.items():
    if release < oldest:
      reasons[example] = (f'uses {api}, new in jax '
                          f'{".".join(map(str, oldest))} (this is {version})')
    missing = [p for p in patches
               if subjects is not None and not any(p in s for s in subjects)]
    if missing:
      reasons[example] = (f'the series for jax {version} has no patch to '
                          + ', '.join(missing))
  return reasons


def _child(path: str, out: str, err: str) -> None:
  """Runs the example `path` as `__main__`, its output into `out` and `err`."""
  for fd, log in ((1, out), (2, err)):
    os.dup2(os.open(log, os.O_WRONLY), fd)
  os.chdir(HERE)
  sys.argv = [path]
  try:
    runpy.run_path(path, run_name='__main__')
  except Exception:  # pylint: disable=broad-except
    traceback.print_exc()  # Without multiprocessing's frames around it.
    sys.exit(1)


def run(name: str, timeout: float) -> tuple[str, str, float]:
  """Runs one example; returns its status, its output and its wall time."""
  start = time.monotonic()
  with tempfile.TemporaryDirectory() as tmp:
    out, err = os.path.join(tmp, 'out'), os.path.join(tmp, 'err')
    for log in (out, err):
      pathlib.Path(log).touch()
    child = _FORKS.Process(target=_child, args=(str(HERE / f'{name}.py'),
                                                out, err))
    child.start()
    child.join(timeout)
    timed_out = child.exitcode is None
    if timed_out:
      child.kill()
      child.join()
    stdout, stderr = (pathlib.Path(log).read_text(errors='replace')
                      for log in (out, err))
  lines = stdout.strip().splitlines()
  if child.exitcode == 0:
    status = 'ok'
  elif timed_out:
    status = f'FAILED (timeout {timeout:g} s)'
  elif lines and lines[-1] == 'MISMATCH':
    status = 'MISMATCH'
  else:
    status = f'FAILED (exit code {child.exitcode})'
  return status, stdout + stderr, time.monotonic() - start


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--timeout', type=float, default=300,
                      help='seconds each example may run (default 300)')
  parser.add_argument('--jobs', type=int, default=os.cpu_count() or 1,
                      help='examples run at once (default: the CPUs)')
  parser.add_argument('names', nargs='*', help='examples (default: all)')
  args = parser.parse_args()
  unknown = set(args.names) - set(examples())
  if unknown:
    parser.error(f'unknown examples: {", ".join(sorted(unknown))}')
  names = args.names or examples()
  reasons = skip_reasons()
  start = time.monotonic()
  results = {n: (f'skipped: {reasons[n]}', '', 0.0)
             for n in names if n in reasons}
  for name, (status, _, _) in results.items():
    print(f'=== {name}: {status}', flush=True)
  with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
    futures = {pool.submit(run, n, args.timeout): n
               for n in names if n not in reasons}
    for future in concurrent.futures.as_completed(futures):
      name = futures[future]
      status, output, _ = results[name] = future.result()
      print(f'=== {name}: {status}')
      print(''.join(f'  {line}\n' for line in output.splitlines()), end='',
            flush=True)
  width = max(map(len, names))
  print('summary:')
  for name in names:
    status, _, seconds = results[name]
    print(f'  {name:<{width}}  {seconds:5.1f} s  {status}')
  count = {s: sum(r[0].startswith(s) for r in results.values())
           for s in ('ok', 'MISMATCH', 'FAILED', 'skipped')}
  skipped = f', {count["skipped"]} skipped' if count['skipped'] else ''
  print(f'examples: {count["ok"]} ok, {count["MISMATCH"]} mismatched, '
        f'{count["FAILED"]} failed{skipped} '
        f'(total {time.monotonic() - start:.1f} s)', flush=True)
  return 0 if count['ok'] + count['skipped'] == len(names) else 1


if __name__ == '__main__':
  sys.exit(main())
