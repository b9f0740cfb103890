"""%%terra cells against the same cells run plainly: names, values, errors, tracebacks."""

from __future__ import annotations

import inspect
import linecache
import re

import pytest
from ext_helpers import assert_same, plain_and_terra

SETUP = "import tensorflow as tf\nv = tf.Variable(0.0)\nw = tf.Variable([1.0, 2.0])"

LOOPS = {
    "for-break-continue-else": """
total = 0
for i, x in enumerate([3.0, 1.0, 4.0, 1.0, 5.0]):
    if i == 1:
        continue
    v.assign_add(x)
    w.assign(w * x)
    total += float(tf.reduce_sum(w * 1.0))
    if i == 3:
        break
else:
    total = -1
after = total * 2
""",
    "for-else-runs": """
seen = []
for step in range(3):
    v.assign_add(float(step))
    seen.append(float(v))
else:
    seen.append("else")
""",
    "while-break-else": """
n = 0
while n < 10:
    n += 1
    w.assign_add([1.0, 1.0])
    if n == 2:
        continue
    if float(w[0]) > 4:
        break
else:
    n = -1
""",
    "nested-function-and-class": """
class Scale:
    def __init__(self, k):
        self.k = k
    def __call__(self, t):
        return t * self.k
def loss_of(t, scale=Scale(2.0)):
    return tf.reduce_sum(scale(t))
losses = [float(loss_of(w * i)) for i in range(2)]
for i in range(3):
    losses.append(float(loss_of(w + i)))
kind = type(Scale(1)).__name__
""",
    "no-loop": """
a = tf.constant([1.0, 2.0])
b = float(tf.reduce_sum(a * w.read_value()))
v.assign(b)
""",
    "last-expression": """
for i in range(2):
    v.assign_add(1.0)
float(v) + 0.5
""",
    "no-loop-last-expression": "z = 3\nz * 2\n",
    "semicolon-silences": "q = 1\nq + 1;\n",
}


@pytest.mark.parametrize("body", LOOPS.values(), ids=LOOPS.keys())
def test_cell_leaves_what_a_plain_cell_leaves(ip, body):
    plain, terra = plain_and_terra(ip, SETUP, body)
    assert plain.error is None
    assert_same(plain, terra)


ERRORS = {
    "exception-in-iteration-k": """
done = []
for i in range(6):
    v.assign_add(1.0)
    done.append(i)
    if i == 3:
        raise ValueError(f"bad batch {i}")
""",
    "iterable-raises": """
def batches():
    for i in range(5):
        if i == 2:
            raise RuntimeError("reader failed")
        yield i
got = []
for b in batches():
    got.append(b)
    v.assign_add(1.0)
""",
    "iter-raises": """
class Broken:
    def __iter__(self):
        raise OSError("cannot open")
before = 1
for b in Broken():
    v.assign_add(1.0)
""",
    "non-iterable": "before = 1\nfor x in 42:\n    v.assign_add(1.0)\n",
    "while-condition-raises": "n = 0\nwhile 1 / (2 - n):\n    n += 1\n",
    "error-before-loop": "a = 1\nb = undefined_name\nfor i in range(3):\n    a += i\n",
    "error-after-loop": "a = 0\nfor i in range(3):\n    a += i\nb = a / 0\n",
    "interrupt-in-iteration-k": """
count = 0
for i in range(10):
    w.assign_add([1.0, 1.0])
    count += 1
    if i == 4:
        raise KeyboardInterrupt
""",
    "syntax-error": "a = 1\nfor i in range(3)\n    a += i\n",
}


@pytest.mark.parametrize("body", ERRORS.values(), ids=ERRORS.keys())
def test_failing_cell_fails_like_a_plain_cell(ip, body):
    plain, terra = plain_and_terra(ip, SETUP, body)
    assert plain.error is not None
    assert_same(plain, terra)


def test_traceback_points_at_the_cell_line(ip):
    result = ip.run_cell("%%terra\nx = 0\nfor i in range(3):\n    x += 10 // (1 - i)\n")
    tb = result.error_in_exec.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    filename = tb.tb_frame.f_code.co_filename
    assert filename.startswith("<terra-cell-")
    assert tb.tb_lineno == 4
    assert linecache.getline(filename, 4) == "    x += 10 // (1 - i)\n"
    assert linecache.getline(filename, 1) == "%%terra\n"


def test_syntax_error_points_at_the_cell_line(ip):
    result = ip.run_cell("%%terra --quiet\nx = 0\nfor i in range(3)\n    x += i\n")
    error = result.error_in_exec
    assert isinstance(error, SyntaxError)
    assert error.lineno == 3 and error.filename.startswith("<terra-cell-")


def test_functions_defined_in_the_cell_keep_their_source(ip):
    source = "def double(t):\n    '''Twice t.'''\n    return t * 2\n"
    body = source + "\nfor i in range(2):\n    y = double(i)\n"
    assert ip.run_cell("%%terra\n" + body).success
    assert inspect.getsource(ip.user_ns["double"]) == source


def test_same_cell_reuses_what_earlier_runs_learned(ip):
    cell = "%%terra\nfor i in range(3):\n    v.assign_add(tf.square(tf.constant(float(i))))\n"
    assert ip.run_cell("import tensorflow as tf\nv = tf.Variable(0.0)").success
    assert ip.run_cell(cell).success
    runner = ip.magics_manager.registry["TerraMagics"].runner
    first = runner.last
    assert first.stats[0].covered is False
    assert ip.run_cell(cell).success
    second = runner.last
    assert second is not first
    assert second.stats[0].covered is True  # the graph from the first run already covers it
    assert len(second.graph.nodes) == len(first.graph.nodes)
    assert runner.cached == 1
    other = "%%terra\nfor i in range(3):\n    v.assign_add(tf.constant(float(i)) * 2.0)\n"
    assert ip.run_cell(other).success
    assert runner.last.stats[0].covered is False
    assert runner.cached == 2


def test_line_magics_inside_the_cell_are_transformed(ip):
    plain, terra = plain_and_terra(ip, "", "%cd .\nfor i in range(2):\n    last = i\n")
    assert_same(plain, terra)


def test_existing_dunder_terra_name_is_restored(ip):
    ip.user_ns["__terra__"] = "mine"
    assert ip.run_cell("%%terra\nfor i in range(2):\n    pass\n").success
    assert ip.user_ns["__terra__"] == "mine"


def test_leading_blank_lines_keep_traceback_lines(ip):
    """IPython drops a cell's leading blank lines; tracebacks still point at the right line."""
    from IPython.utils.capture import capture_output

    with capture_output() as captured:
        result = ip.run_cell("%%terra --quiet\n\nx = 1\n1/0\n")
    assert isinstance(result.error_in_exec, ZeroDivisionError)
    plain = re.sub(r"\x1b\[[0-9;]*m", "", captured.stdout)  # IPython 9 colours every token
    arrows = [line for line in plain.splitlines() if "----> 4" in line]
    assert arrows and "1/0" in arrows[-1]
