"""The migration tool's commands, timed on a scratch venv.

Makes a venv (in a temporary directory, or `--scratch_dir`, reused while
its jax is pristine) with the pristine jax wheel installed with `pip install
--no-deps` plus absl-py and filelock (no jaxlib: the tool never imports
jax), then times, with that venv's Python and `PYTHONPATH` set
to the repository root:

- `python -c pass` (the interpreter's own start-up, for reference);
- `python -m migration status`, and which modules it imports (`-X
  importtime`): none may be jax;
- `python -m migration apply` then `revert`, checking that `status` reports
  the files pristine again;
- `python -m migration wheel -o DIR`, if the tool has that command (after
  installing the `wheel` package that it needs).

Run with any Python that has absl-py (it finds or downloads the wheel with
`migration.wheels`). Prints `{"startup_s": [...], "status_s": [...],
"status_cpu_s": [...], "jax_modules": [...], "cli_import_s": ...,
"slowest_imports": [...], "apply_s": [...], "revert_s": [...], "wheel":
...}`.
"""

import argparse
import json
import os
import pathlib
import resource
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

# pylint: disable=g-import-not-at-top
from migration import wheels

import _common
# pylint: enable=g-import-not-at-top

JAX_VERSION = '0.12.0.1'
PIP = ('-m', 'pip', 'install', '--quiet', '--disable-pip-version-check')


def _children_cpu_s() -> float:
  usage = resource.getrusage(resource.RUSAGE_CHILDREN)
  return usage.ru_utime + usage.ru_stime


def _run(python: str, *args: str, cwd: str = str(ROOT), check: bool = True,
         cpu: list[float] | None = None,
         ) -> tuple[float, subprocess.CompletedProcess]:
  """Runs `python *args` with the repository on `PYTHONPATH`.

  Args:
    python: The interpreter.
    *args: Its arguments.
    cwd: Where to run it.
    check: Raise if it fails.
    cpu: If given, the CPU time (user + system) of the run is appended.

  Returns:
    The wall time in seconds and the completed process.
  """
  env = dict(os.environ, PYTHONPATH=str(ROOT))
  start, start_cpu = time.perf_counter(), _children_cpu_s()
  proc = subprocess.run([python, *args], cwd=cwd, env=env, text=True,
                        capture_output=True, check=False)
  elapsed = time.perf_counter() - start
  if cpu is not None:
    cpu.append(_children_cpu_s() - start_cpu)
  if check and proc.returncode != 0:
    raise RuntimeError(f'{python} {" ".join(args)} exited with '
                       f'{proc.returncode}:\n{proc.stdout}\n{proc.stderr}')
  return elapsed, proc


def _state(python: str) -> str:
  _, proc = _run(python, '-m', 'migration', 'status', '--json')
  return json.loads(proc.stdout)['state']


def scratch_venv(directory: str) -> str:
  """Reuses the scratch venv if its jax is pristine, else makes it anew.

  Args:
    directory: Where the venv is (to be).

  Returns:
    Its Python.
  """
  python = os.path.join(directory, 'bin', 'python')
  if os.path.exists(python):
    try:
      if _state(python) == 'pristine':
        return python
    except (RuntimeError, ValueError, KeyError):
      pass
    shutil.rmtree(directory)
  wheel = wheels.pristine_wheel(JAX_VERSION)
  for cmd in ([sys.executable, '-m', 'venv', directory],
              [python, *PIP, '--no-deps', wheel],
              [python, *PIP, 'absl-py', 'filelock']):
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
      raise RuntimeError(f'{" ".join(cmd)} exited with {proc.returncode}:\n'
                         f'{proc.stdout}\n{proc.stderr}')
  return python


def imports(python: str) -> dict[str, object]:
  """What `status` imports, from `-X importtime`.

  Args:
    python: The interpreter.

  Returns:
    `jax_modules`: the jax and jaxlib modules imported (should be none);
    `cli_import_s`: the cumulative import time of `migration.cli`;
    `slowest_imports`: the 5 slowest direct imports of `migration.cli`, as
    (name, cumulative seconds).
  """
  _, proc = _run(python, '-X', 'importtime', '-m', 'migration', 'status')
  jax_modules, children, cli = [], [], {'children': [], 's': 0.0}
  for line in proc.stderr.splitlines():
    if not line.startswith('import time:') or '|' not in line:
      continue
    _, cumulative, name = line.split(':', 1)[1].split('|')
    if not cumulative.strip().isdigit():
      continue  # The header line.
    depth = (len(name) - len(name.lstrip()) - 1) // 2
    name, seconds = name.strip(), int(cumulative) / 1e6
    if name.split('.')[0] in ('jax', 'jaxlib'):
      jax_modules.append(name)
    # A module's imports are printed before it, one level deeper.
    if depth == 1:
      children.append((name, seconds))
    elif depth == 0:
      if name == 'migration.cli':
        cli = {'children': children, 's': seconds}
      children = []
  slowest = sorted(cli['children'], key=lambda x: -x[1])[:5]
  return {'jax_modules': jax_modules, 'cli_import_s': cli['s'],
          'slowest_imports': slowest}


def main():
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument('--repeats', type=int, default=5)
  parser.add_argument('--round_trips', type=int, default=3)
  parser.add_argument('--scratch_dir', default=None,
                      help='the scratch venv, reused if pristine (default: '
                      'a temporary directory)')
  args = parser.parse_args()
  with tempfile.TemporaryDirectory(prefix='bench-migration-') as tmp:
    python = scratch_venv(args.scratch_dir or os.path.join(tmp, 'venv'))
    if _state(python) != 'pristine':
      raise RuntimeError('the scratch venv does not start pristine')
    result = {'startup_s': [], 'status_s': [], 'status_cpu_s': [],
              'apply_s': [], 'revert_s': []}
    _run(python, '-m', 'migration', 'status')  # Warm the page cache.
    for _ in range(args.repeats):
      result['startup_s'].append(_run(python, '-c', 'pass')[0])
      result['status_s'].append(_run(python, '-m', 'migration', 'status',
                                     cpu=result['status_cpu_s'])[0])
    result.update(imports(python))
    for _ in range(args.round_trips):
      result['apply_s'].append(_run(python, '-m', 'migration', 'apply')[0])
      if _state(python) != 'patched':
        raise RuntimeError('apply did not leave jax patched')
      result['revert_s'].append(_run(python, '-m', 'migration', 'revert')[0])
      if _state(python) != 'pristine':
        raise RuntimeError('revert did not leave jax pristine')
    _, proc = _run(python, '-c',
                   'from migration import cli; print("wheel" in cli.COMMANDS)')
    if proc.stdout.strip() == 'True':
      # Building a wheel needs the `wheel` package (python -m wheel).
      subprocess.run([python, *PIP, 'wheel'], capture_output=True,
                     check=True)
      dist = os.path.join(tmp, 'dist')
      elapsed, proc = _run(python, '-m', 'migration', 'wheel', '-o', dist,
                           cwd=tmp, check=False)
      result['wheel'] = {'s': elapsed, 'exit_code': proc.returncode,
                         'built': sorted(os.listdir(dist))
                                  if os.path.isdir(dist) else [],
                         'output': (proc.stdout + proc.stderr)[-2000:]}
    else:
      result['wheel'] = None
  _common.emit(result)


if __name__ == '__main__':
  main()
