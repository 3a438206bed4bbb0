"""Merges raw chip logs of upstream's TPU tests into a `--tpu chip` report.

`python -m jax_fork coverage --tpu chip` keeps nothing of a file that runs
past the time a device call has. So on 2026-12-06 the files were run on the
TPU v5e by hand, one pytest process per file (or group of small files),
each with `coverage_plugin` loaded exactly as `jax_fork coverage --tpu chip`
loads it (`JAX_FORK_COVERAGE_TPU=chip`, 60 s per test) and killed after a
time limit of its own (coreutils `timeout -s INT`); the plugin's JSON lines
(`JAX_FORK_COVERAGE_LOG`) come back as they are written. This script
classifies those records with `jax_fork.coverage.classify`, as the tool
does, and adds them to the report:

    python hardware/merge_chip_logs.py REPORT LOG [LOG...]

A test that started and has no record was stopped by its process's time
limit: it is left out of the counts and listed in `not_finished`.
"""

from __future__ import annotations

import collections
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from jax_fork import coverage  # pylint: disable=g-import-not-at-top

PREFIX = '.upstream/jax-0.10.2/'  # Node ids as in the report's first files.


def read(logs):
  started, records = [], collections.defaultdict(list)
  for log in logs:
    s, r = coverage._read(log)  # pylint: disable=protected-access
    started += s
    for k, v in r.items():
      records[k] += v
  return started, records


def main(report_path, logs):
  with open(report_path, encoding='utf-8') as f:
    report = json.load(f)
  started, records = read(logs)
  new = [coverage.Outcome(t.split('::')[0], PREFIX + t,
                          *coverage.classify(rs),
                          seconds=round(sum(r.get('duration', 0)
                                            for r in rs), 2))
         for t, rs in records.items()]
  files = {o.file for o in new}
  old = [coverage.Outcome(**t) for t in report['tests']
         if t['file'] not in files]
  outcomes = old + new
  unfinished = [PREFIX + t for t in started if t not in records]
  merged = coverage.to_json(outcomes)
  report.update(files=merged['files'], causes=merged['causes'],
                tests=merged['tests'], not_finished=unfinished)
  tests = report.pop('tests')
  text = json.dumps(report, indent=1)[:-2]  # One test a line, as before.
  text += ',\n "tests": [\n' + ',\n'.join(
      '  ' + json.dumps(t, sort_keys=True, separators=(',', ':'))
      for t in tests) + '\n ]\n}\n'
  with open(report_path, 'w', encoding='utf-8') as f:
    f.write(text)
  print(coverage.table_text(outcomes))
  print('not finished:', unfinished)


if __name__ == '__main__':
  main(sys.argv[1], sys.argv[2:])
