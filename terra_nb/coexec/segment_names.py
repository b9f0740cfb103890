"""The names segments have in the timeline and the Chrome trace: ``segment s3 · MatMul … Tanh``.

One name per segment key, the same on every run (numbered in order of first sight), so a person
can tell which segment ran where; a region's function call is named by its region.
"""

from __future__ import annotations


class SegmentNames:
    """Segment key -> its name (forgotten with the GraphRunner's sightings)."""

    def __init__(self) -> None:
        self._names: dict[tuple, str] = {}

    def name(self, key: tuple, entries: list) -> str:
        """The name of the segment ``key`` (its ops: ``entries``)."""
        label = self._names.get(key)
        if label is None:
            types = [short_op(e.op_type) for e in entries]
            what = types[0] if len(types) == 1 else f"{types[0]} … {types[-1]}" if types else ""
            label = self._names[key] = f"segment s{len(self._names) + 1} · {what}"
        return label

    def clear(self) -> None:
        self._names.clear()


def short_op(op_type: str) -> str:
    """An op type as the timeline names it: a region's function without its prefix and number
    (``__inference_region_Sequential_forward_12`` -> ``region_Sequential_forward``)."""
    if op_type.startswith("__inference_"):
        return op_type[len("__inference_"):].rstrip("0123456789").rstrip("_")
    return op_type
