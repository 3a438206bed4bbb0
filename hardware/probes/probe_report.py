"""Writes a probe's report, the JSON file that the parity tests read.

The probes in this folder run as scripts on a TPU (`python3
hardware/probes/X.py --out DIR`) and are imported as `probes.X` by
`tests/hardware_parity_test.py`; each imports this module either way.
"""

from __future__ import annotations

import json
import os
from typing import Any


def write(report: dict[str, Any], out_dir: str, name: str) -> str:
  """Writes `report` as indented JSON to `out_dir/name` and prints the path.

  Args:
    report: What the probe measured; JSON-serialisable.
    out_dir: The folder to write into; made if it does not exist.
    name: The file's name, e.g. "vmem_probe.json".

  Returns:
    The path written.

  Raises:
    OSError: The folder or the file cannot be written.
  """
  os.makedirs(out_dir, exist_ok=True)
  path = os.path.join(out_dir, name)
  with open(path, 'w', encoding='utf-8') as f:
    json.dump(report, f, indent=1)
    f.write('\n')
  print('wrote', path)
  return path
