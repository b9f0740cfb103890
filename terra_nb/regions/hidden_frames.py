"""terra-nb's own frames, left out of the stacks TensorFlow records for the graph nodes it
traces, as TensorFlow leaves out its own.

TensorFlow keeps, for each node a trace makes, the Python stack that made it, and names those
lines in a runtime error ("Detected at node ... defined at"). A ``tf.function`` first traced while
a region wrapper is on the stack (a user function, or one a layer calls) would name the wrapper's
lines there, in every later error of that function, long after the loop. Inside
``HiddenFrames()`` (a regions iteration) terra-nb's files are filtered out of those stacks
(``tf_stack``'s thread-local filters): the error reads as in eager.
"""

from __future__ import annotations

import glob
import os

from tensorflow.python.util import tf_stack

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_FILES = frozenset(glob.glob(os.path.join(_PACKAGE, "**", "*.py"), recursive=True))


class HiddenFrames(tf_stack.StackTraceFilter):
    """A context: nodes traced inside it do not record terra-nb's frames. One thread enters it
    again and again (each regions iteration): its file set goes to TensorFlow again only when
    the filters around it changed (handing it over took ~40 us an iteration)."""

    def __init__(self) -> None:
        super().__init__()
        self._around: frozenset | None = None  # the enclosing filters' files it was made for

    def get_filtered_filenames(self) -> frozenset:
        return _FILES | self.parent.get_filtered_filenames()

    def update(self) -> None:
        around = self.parent.get_filtered_filenames()
        if around is not self._around and around != self._around:
            self._around = around
            self.internal_set.update_to(set(_FILES | around))
