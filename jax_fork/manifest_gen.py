"""Generates ``patches/manifest.json`` from the series and released wheels.

``migration.manifest`` reads and checks the manifest; this module writes it
(``python -m jax_fork manifest``, and ``fork``, ``refresh`` and ``port``
after they change a series).
"""

from __future__ import annotations

import json
import os
import stat
import tempfile

from migration import check
from migration import errors
from migration import fsutil
from migration import manifest as manifest_lib
from migration import wheels


def _hash_states(patches: list[manifest_lib.Patch], wheel: str,
                 files: list[str]
                 ) -> tuple[dict[str, tuple[str | None, ...]], list[str]]:
  """Applies the series to the wheel's files; hashes after each patch.

  Returns:
    File -> hashes (pristine, after patch 1, ...), and the names of the
    patches the release already contains (their hashes repeat).

  Raises:
    PatchDataError: a patch conflicts with the release.
  """
  states: dict[str, list[str | None]] = {f: [] for f in files}
  with tempfile.TemporaryDirectory() as tmp:
    wheels.extract(wheel, files, tmp)

    def record(_, fit=None):
      if fit is not None and fit.fit == check.Fit.CONFLICT:
        raise errors.PatchDataError(
            f'{os.path.basename(wheel)}: {fit.name} does not apply:\n'
            f'{fit.message}')
      for f in files:
        states[f].append(manifest_lib.sha256_path(
            os.path.join(tmp, *f.split('/'))))

    record(0)
    fits = check.check_tree(patches, tmp, record)
  upstream = [f.name for f in fits if f.fit == check.Fit.UPSTREAM]
  return {f: tuple(h) for f, h in states.items()}, upstream


def _superseded(old: dict, states: dict[str, tuple[str | None, ...]]
                ) -> dict[str, list[str]]:
  """The hashes of files fully patched by earlier series, per file.

  Args:
    old: the version's entry in the manifest being replaced (``{}`` if
      none).
    states: file -> its hashes with the new series (pristine, after patch 1,
      ...).

  Returns:
    File -> sorted sha256s: the old entry's ``superseded`` and its fully
    patched hash, less those the new series also gives (where nothing
    changed). Files the new series does not touch are left out.
  """
  out = {}
  for f, hashes in states.items():
    earlier = set(old.get('superseded', {}).get(f, ()))
    entry = old.get('files', {}).get(f)
    if entry:
      earlier.add((entry['after_patch'] or [entry['pristine']])[-1])
    earlier -= set(hashes) | {None}
    if earlier:
      out[f] = sorted(earlier)
  return out


def generate(patches_dir: str, serve: dict[str, list[str]] | None = None,
             release: int | None = None,
             wheel_dirs: tuple[str, ...] = ()) -> dict:
  """(Re)generates ``manifest.json`` from the series and pristine wheels.

  The hashes of files fully patched by the series the existing manifest
  describes, where the new series gives other ones, are kept as
  ``superseded`` (with those it already kept): ``python -m migration`` then
  updates an install an earlier release patched instead of refusing it as
  locally modified.

  Args:
    patches_dir: the patches directory; every subfolder with a ``series``
      file is a series.
    serve: series name -> served jax versions; replaces what the existing
      manifest declares for those series.
    release: the project release number; default: keep the existing one
      (1 for a new manifest).
    wheel_dirs: directories searched for pristine wheels before the cache.

  Returns:
    The manifest as written.

  Raises:
    PatchDataError: a series declares no versions or does not apply to a
      pristine wheel.
    EnvironmentProblem: git is missing or a wheel cannot be fetched.
  """
  path = os.path.join(patches_dir, manifest_lib.MANIFEST)
  old: dict = {}
  if os.path.isfile(path):
    with open(path, encoding='utf-8') as f:
      old = json.load(f)
  serve = dict(serve or {})
  out: dict = {'format': manifest_lib.FORMAT,
               'release': release or int(old.get('release', 1)),
               'series': {}}
  old_versions = {v: vraw for sraw in old.get('series', {}).values()
                  for v, vraw in sraw.get('versions', {}).items()}
  names = sorted(d for d in os.listdir(patches_dir)
                 if os.path.isfile(
                     os.path.join(patches_dir, d, manifest_lib.SERIES)))
  for sname in names:
    versions = serve.pop(sname, None)
    if versions is None:
      versions = list(old.get('series', {}).get(sname, {}).get('versions', {}))
    if not versions:
      raise errors.PatchDataError(
          f'No served jax versions declared for {sname}; pass '
          f'--serve={sname}=VERSION[,VERSION...].')
    directory = os.path.join(patches_dir, sname)
    patches = [manifest_lib.read_patch(directory, n)
               for n in manifest_lib.read_series_file(directory)]
    files: list[str] = []
    for p in patches:
      files.extend(f for f in p.files if f not in files)
    sout: dict = {
        'patches': [{'name': p.name, 'sha256': p.sha256, 'files': list(p.files),
                     'subject': p.subject, 'dep3': p.dep3} for p in patches],
        'versions': {}}
    for version in sorted(versions, key=manifest_lib.version_key):
      wheel = wheels.pristine_wheel(version, wheel_dirs)
      states, upstream = _hash_states(patches, wheel, files)
      sout['versions'][version] = {
          'upstream': upstream,
          'wheel': os.path.basename(wheel),
          'wheel_sha256': wheels.sha256_file(wheel),
          'files': {f: {'pristine': h[0], 'after_patch': list(h[1:])}
                    for f, h in states.items()}}
      superseded = _superseded(old_versions.get(version, {}), states)
      if superseded:
        sout['versions'][version]['superseded'] = superseded
    out['series'][sname] = sout
  seen: dict[str, str] = {}
  for sname, sout in out['series'].items():
    for version in sout['versions']:
      if version in seen:
        raise errors.PatchDataError(
            f'jax {version} is served by both {seen[version]} and {sname}.')
      seen[version] = sname
  if serve:
    raise errors.PatchDataError(
        f'--serve names unknown series: {", ".join(sorted(serve))}.')
  out['checksum'] = manifest_lib.checksum(out)
  # A committed file keeps its mode (a clone's 0o644, not mkstemp's 0o600).
  try:
    mode = stat.S_IMODE(
        os.stat(os.path.join(patches_dir, manifest_lib.MANIFEST)).st_mode)
  except FileNotFoundError:
    mode = 0o644
  fsutil.write_atomic(patches_dir, manifest_lib.MANIFEST, (
      json.dumps(out, indent=2, sort_keys=True) + '\n').encode(), mode)
  return out
