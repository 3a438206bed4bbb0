"""Tests of `drift`: the changes of a series compared with the newest's."""

from __future__ import annotations

import collections
import os
import shutil
import subprocess
import sys
import tempfile

from absl.testing import absltest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from jax_fork import drift  # noqa: E402
from migration import manifest as manifest_lib  # noqa: E402

PATCHES = os.path.join(REPO, 'patches')

# A removed line that starts with '--' and an added one that starts with
# '++' are hunk lines, not file headers: the hunk header's counts say so.
# Trailing whitespace is ignored.
PATCH = """\
Subject: [PATCH] x

---
diff --git a/a.py b/a.py
index 1111111..2222222 100644
--- a/a.py
+++ b/a.py
@@ -1,4 +1,4 @@ def f():
 keep
--- old
+++ new
 keep too
-x = 1{TRAILING}
+x = 2
\\ No newline at end of file
diff --git a/b.py b/b.py
--- a/b.py
+++ b/b.py
@@ -10 +10,2 @@
-x = 1
+x = 2
+x = 2
""".replace('{TRAILING}', '   ')


class DriftTest(absltest.TestCase):

  def test_change_lines_ignores_context_and_headers(self):
    self.assertEqual(
        drift.change_lines(PATCH),
        collections.Counter({('-', '-- old'): 1, ('+', '++ new'): 1,
                             ('-', 'x = 1'): 2, ('+', 'x = 2'): 3}))

  def test_repository_drift_is_recorded(self):
    manifest = manifest_lib.load(PATCHES)
    baseline = drift.load_baseline(manifest)
    new = [(d.series, d.subject) for d in drift.compare(manifest)
           if drift.status(d, baseline) == 'new']
    self.assertEqual(new, [], 'run python -m jax_fork drift')

  def test_an_uncarried_line_is_new_drift_and_update_records_it(self):
    tmp = tempfile.mkdtemp(prefix='drift-test-')
    self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
    patches = os.path.join(tmp, 'patches')
    shutil.copytree(PATCHES, patches)
    manifest = manifest_lib.load(patches)  # Checks hashes now, not later.
    newest = drift.newest_series(manifest)
    last = newest.patches[-1]
    with open(last.path, encoding='utf-8') as f:
      text = f.read()
    # One more added line in the newest series' last patch only: its hunk
    # header's new count grows by one.
    head, sep, rest = text.partition('\n@@ ')
    header, nl, body = rest.partition('\n')
    old, new = header.split(' @@', 1)[0].split(' ')
    start, _, count = new.partition(',')
    header = header.replace(f'{new} @@', f'{start},{int(count or 1) + 1} @@',
                            1)
    with open(last.path, 'w', encoding='utf-8') as f:
      f.write(head + sep + header + nl + '+# not carried\n' + body)
    drifts = drift.compare(manifest)
    baseline = drift.load_baseline(manifest)
    new_drift = sorted({(d.series, d.subject) for d in drifts
                        if drift.status(d, baseline) == 'new'})
    # Series without that patch (a newer feature than their release's
    # interpreter supports) already record it as absent.
    others = sorted(
        s for s in manifest.series
        if s != newest.name
        and any(p.subject == last.subject
                for p in manifest.series[s].patches)
    )
    self.assertTrue(others)
    self.assertEqual(new_drift, [(s, last.subject) for s in others])
    for d in drifts:
      if d.subject == last.subject and not d.absent:
        self.assertIn(('+', '# not carried'), d.only_newest)
    drift.write_baseline(manifest, drifts)
    baseline = drift.load_baseline(manifest)
    self.assertFalse([d for d in drift.compare(manifest)
                      if drift.status(d, baseline) == 'new'])
    proc = subprocess.run(
        [sys.executable, '-m', 'jax_fork', 'drift',
         f'--patches_dir={patches}', f'--series={others[0]}'],
        env=dict(os.environ, PYTHONPATH=REPO), capture_output=True,
        text=True, check=False)
    # The manifest no longer matches the edited patch: exit code 7.
    self.assertEqual(proc.returncode, 7, proc.stderr)
    self.assertIn('does not match the manifest', proc.stderr)


if __name__ == '__main__':
  absltest.main()
