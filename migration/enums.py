"""``enum.StrEnum`` for Python 3.10, which lacks it."""

from __future__ import annotations

import enum


class StrEnum(str, enum.Enum):
  """An enum whose members are strings and print as their value."""

  def __str__(self) -> str:
    return self.value

  def __format__(self, spec: str) -> str:
    return self.value.__format__(spec)
