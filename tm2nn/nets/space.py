"""Labelled vector spaces: every dimension of every hidden vector has a name.

Labels look like ``group:item`` (``g:n42``, ``st:q3``, ``sym1:a``, ``pos2:bit5``,
``round_lo:n42``), so a model can be printed, drawn and decoded by name, like
Tracr's named basis directions.

``Space(labels)`` checks that the labels are distinct.  A construction that makes its
labels one-to-one from distinct names can skip the check (:meth:`Space.of_distinct`),
and have them made only when first read (:meth:`Space.prefixed`): a relu-circuit net
of a 10^6-gate circuit has 2·10^7 labels in thousands of spaces, and compiling it to
ONNX reads none of them.  Either way a space is the same value (equality, hash,
``labels``).
"""

from __future__ import annotations

from functools import cached_property


class Space:
    """An immutable sequence of distinct labels (see the module doc)."""

    __slots__ = ("_labels", "_parts", "__dict__")  # __dict__: the cached properties

    def __init__(self, labels) -> None:
        labels = tuple(labels)
        if len(set(labels)) != len(labels):
            dup = next(lab for lab in labels if labels.count(lab) > 1)
            raise ValueError(f"duplicate dimension label {dup!r}")
        self._labels: tuple[str, ...] | None = labels
        self._parts: tuple[tuple[str, ...], tuple[str, ...]] | None = None

    @classmethod
    def of_distinct(cls, labels) -> "Space":
        """A space whose labels the caller knows are distinct, without the check."""
        space = object.__new__(cls)
        space._labels, space._parts = tuple(labels), None
        return space

    @classmethod
    def prefixed(cls, prefixes, names) -> "Space":
        """The labels ``p + name`` for each of ``names`` (distinct, and with no prefix
        that is another's start), and for each of ``prefixes`` in turn: ``prefixed(("rlo:",
        "rhi:"), ["a", "b"])`` is ``rlo:a rhi:a rlo:b rhi:b``.  They are made when first
        read."""
        space = object.__new__(cls)
        space._labels, space._parts = None, (tuple(prefixes), tuple(names))
        return space

    @property
    def labels(self) -> tuple[str, ...]:
        if self._labels is None:
            prefixes, names = self._parts  # type: ignore[misc]
            if len(prefixes) == 1:
                p = prefixes[0]
                self._labels = tuple([p + s for s in names])
            else:
                self._labels = tuple([p + s for s in names for p in prefixes])
            self._parts = None
        return self._labels

    def __len__(self) -> int:
        if self._labels is None:
            prefixes, names = self._parts  # type: ignore[misc]
            return len(prefixes) * len(names)
        return len(self._labels)

    def __iter__(self):
        return iter(self.labels)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return len(self) == len(other) and self.labels == other.labels  # type: ignore[arg-type]

    def __hash__(self) -> int:
        return hash((self.labels,))

    def __repr__(self) -> str:
        return f"Space(labels={self.labels!r})"

    def __setattr__(self, name: str, value) -> None:
        if name in ("_labels", "_parts"):
            object.__setattr__(self, name, value)
        else:
            raise AttributeError(f"a Space is immutable (cannot set {name!r})")

    def __getstate__(self):
        return self.labels

    def __setstate__(self, labels) -> None:
        object.__setattr__(self, "_labels", labels)
        object.__setattr__(self, "_parts", None)

    @cached_property
    def _index(self) -> dict[str, int]:
        """Label -> dimension, built on first use."""
        return {lab: i for i, lab in enumerate(self.labels)}

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
