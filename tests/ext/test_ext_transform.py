"""The %%terra cell transform, as pure AST: no IPython, no TensorFlow."""

from __future__ import annotations

import ast
import textwrap
from contextlib import contextmanager

import pytest

from kernel_ext.transform import RESULT, TERRA, transform_cell


def unparse(source: str) -> str:
    return ast.unparse(transform_cell(textwrap.dedent(source)).module)


def test_first_top_level_for_becomes_the_terra_loop():
    out = unparse(
        """
        a = 1
        for x, y in batches:
            for z in inner:
                pass
        for w in later:
            pass
        """
    )
    assert out == textwrap.dedent(
        f"""\
        a = 1
        with {TERRA}:
            for x, y in {TERRA}.loop(iter(batches)):
                for z in inner:
                    pass
        for w in later:
            pass"""
    )


def test_while_body_is_one_step_and_else_stays_on_the_loop():
    out = unparse(
        """
        while n < 3:
            n += 1
        else:
            done = True
        """
    )
    assert out == textwrap.dedent(
        f"""\
        with {TERRA}:
            while n < 3:
                with {TERRA}.step():
                    n += 1
            else:
                done = True"""
    )


def test_cell_without_loop_has_no_iteration_of_its_own_and_last_expression_is_kept():
    """The cell runs inside the Terra, not as one traced iteration: a Keras step run eagerly
    in it is an iteration; with none, it runs plainly (and says so)."""
    plan = transform_cell("a = 1\nif a:\n    b = 2\na + 1\n")
    assert plan.loop_kind == "cell" and plan.has_result
    assert ast.unparse(plan.module) == textwrap.dedent(
        f"""\
        with {TERRA}:
            a = 1
            if a:
                b = 2
            {RESULT} = a + 1"""
    )


def test_a_loop_around_fit_is_left_alone_so_its_steps_are_the_iterations():
    source = "for epoch in range(3):\n    model.fit(x, y)\n    print(epoch)\n"
    plan = transform_cell(source)
    assert (plan.loop_kind, plan.loop_line, plan.keras_loop) == ("cell", 0, 1)
    assert ast.unparse(plan.module).startswith(f"with {TERRA}:\n    for epoch in range(3):")
    for call in ("model.evaluate(x)", "preds.append(m.predict(x))"):
        assert transform_cell(f"for b in data:\n    {call}\n").loop_kind == "cell"
    assert transform_cell("for b in data:\n    fit(b)\n").loop_kind == "for"  # no method


def test_loops_inside_functions_or_blocks_are_not_top_level():
    source = "def f():\n    for i in x:\n        pass\nif c:\n    while d:\n        pass\n"
    plan = transform_cell(source)
    assert plan.loop_kind == "cell"


def test_line_numbers_are_those_of_the_source():
    plan = transform_cell("\n\nx = 0\nfor i in r:\n    x += i\n")
    assert (plan.loop_kind, plan.loop_line) == ("for", 4)
    wrapper = plan.module.body[1]
    assert wrapper.lineno == 4 and wrapper.body[0].body[0].lineno == 5


def test_syntax_error_names_the_line():
    with pytest.raises(SyntaxError) as info:
        transform_cell("\nx = 1\nfor i in :\n", "<terra-cell-x>")
    assert info.value.lineno == 3 and info.value.filename == "<terra-cell-x>"


class RecordingTerra:
    """Stands in for terra_nb.Terra: records which iterations ran."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def __enter__(self):
        self.events.append("enter")
        return self

    def __exit__(self, *exc):
        self.events.append("exit")

    def loop(self, iterator):
        for item in iterator:
            self.events.append("iteration")
            yield item

    @contextmanager
    def step(self):
        self.events.append("iteration")
        yield


@pytest.mark.parametrize(
    ("source", "expected_iterations"),
    [
        ("t = 0\nfor i in range(5):\n    if i == 1:\n        continue\n    if i == 3:\n"
         "        break\n    t += i\nelse:\n    t = -1\n", 4),
        ("t = 0\nwhile t < 4:\n    t += 1\n    if t == 2:\n        continue\n"
         "else:\n    t *= 10\n", 4),
        ("t = 7\n", 0),  # no loop: no iteration of its own
    ],
)
def test_transformed_code_computes_what_plain_code_computes(source, expected_iterations):
    plain: dict = {}
    exec(compile(source, "<plain>", "exec"), plain)
    terra = RecordingTerra()
    ns: dict = {TERRA: terra}
    exec(compile(transform_cell(source).module, "<terra>", "exec"), ns)
    assert ns["t"] == plain["t"]
    assert terra.events == ["enter"] + ["iteration"] * expected_iterations + ["exit"]
