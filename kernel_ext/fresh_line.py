"""Whether the cell's own output ended its line: the ``%%terra`` summary line then starts on a
fresh one (after ``print(".", end="")`` it was glued onto the dots).

``LineEnd.watch()`` puts a thin proxy in front of ``sys.stdout`` while the cell runs: it passes
everything through and remembers whether the last text written ended with a newline.
"""

from __future__ import annotations

import sys
from typing import Any


class LineEnd:
    """A proxy for a text stream that remembers whether the last write ended a line."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.fresh = True

    def write(self, text: str) -> int:
        if text:
            self.fresh = text.endswith("\n")
        return self._stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    @classmethod
    def watch(cls) -> LineEnd:
        """Start watching ``sys.stdout``."""
        proxy = cls(sys.stdout)
        sys.stdout = proxy
        return proxy

    def stop(self) -> bool:
        """Stop watching (``sys.stdout`` as it was, unless the cell replaced it); whether the
        output ended its line."""
        if sys.stdout is self:
            sys.stdout = self._stream
        return self.fresh
