"""Labelled vector spaces: every dimension of every hidden vector has a name.

Labels look like ``group:item`` (``g:n42``, ``st:q3``, ``sym1:a``, ``pos2:bit5``,
``round_lo:n42``), so a model can be printed, drawn and decoded by name, like
Tracr's named basis directions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property


@dataclass(frozen=True)
class Space:
    labels: tuple[str, ...]
    _index: dict = field(default=None, init=False, repr=False, compare=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        labels = tuple(self.labels)
        object.__setattr__(self, "labels", labels)
        index = {lab: i for i, lab in enumerate(labels)}
        if len(index) != len(labels):
            dup = next(lab for lab in labels if labels.count(lab) > 1)
            raise ValueError(f"duplicate dimension label {dup!r}")
        object.__setattr__(self, "_index", index)

    def __len__(self) -> int:
        return len(self.labels)

    def __iter__(self):
        return iter(self.labels)

    def index(self, label: str) -> int:
        return self._index[label]

    def __contains__(self, label: str) -> bool:
        return label in self._index

    @cached_property
    def groups(self) -> dict[str, list[int]]:
        """Dimension indices by label group (the part before the first ':')."""
        out: dict[str, list[int]] = {}
        for i, lab in enumerate(self.labels):
            out.setdefault(lab.split(":", 1)[0], []).append(i)
        return out

    @staticmethod
    def concat(*spaces: "Space") -> "Space":
        return Space(tuple(lab for s in spaces for lab in s.labels))

    @staticmethod
    def named(group: str, items) -> "Space":
        return Space(tuple(f"{group}:{it}" for it in items))
