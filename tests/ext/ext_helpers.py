"""Helpers for the in-process extension tests: namespace snapshots and the plain-vs-%%terra
comparison."""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any

INTERNAL = ("__terra__", "__terra_result__")


def user_vars(shell: Any) -> dict[str, Any]:
    """The names a cell left: everything but IPython's own and history names."""
    hidden = shell.user_ns_hidden
    return {
        k: v
        for k, v in shell.user_ns.items()
        if k not in hidden and not (k.startswith("_") and k not in INTERNAL)
    }


def comparable(value: Any) -> Any:
    """A value that compares by content: tensors and arrays as lists, code objects by name."""
    if hasattr(value, "numpy") and callable(value.numpy):
        return ("tensor", value.numpy().tolist())
    if hasattr(value, "__array__") and hasattr(value, "tolist"):
        return ("array", value.tolist())
    if isinstance(value, types.FunctionType | type):
        return ("def", value.__qualname__)
    if isinstance(value, types.ModuleType):
        return ("module", value.__name__)
    if isinstance(value, list | tuple):
        return type(value)(comparable(v) for v in value)
    if isinstance(value, dict):
        return {k: comparable(v) for k, v in value.items()}
    if isinstance(value, int | float | str | bool | type(None)):
        return value
    return ("object", type(value).__qualname__)


def snapshot(shell: Any) -> dict[str, Any]:
    return {k: comparable(v) for k, v in user_vars(shell).items()}


@dataclass
class Outcome:
    """What running a cell did: its displayed value, its error, the names it left."""

    result: Any
    error: BaseException | None
    names: dict[str, Any]
    out: str


def run(shell: Any, cell: str, capsys: Any = None) -> Outcome:
    """Run ``cell`` and report; ``capsys`` (optional) collects what it printed."""
    result = shell.run_cell(cell, store_history=True)
    out = capsys.readouterr().out if capsys is not None else ""
    error = result.error_before_exec or result.error_in_exec
    return Outcome(comparable(result.result), error, snapshot(shell), out)


def plain_and_terra(shell: Any, setup: str, body: str, options: str = "", capsys: Any = None):
    """Run ``setup`` then ``body`` plainly, then (fresh namespace) under ``%%terra options``."""
    outcomes = []
    for cell in (body, f"%%terra {options}\n{body}"):
        shell.reset(new_session=False)
        if setup:
            assert shell.run_cell(setup).success
        if capsys is not None:
            capsys.readouterr()
        outcomes.append(run(shell, cell, capsys))
    return outcomes


def assert_same(plain: Outcome, terra: Outcome) -> None:
    """The %%terra cell left exactly what the plain cell left, and failed the same way."""
    assert terra.names == plain.names
    assert terra.result == plain.result
    assert type(terra.error) is type(plain.error)
    assert getattr(terra.error, "msg", str(terra.error)) == getattr(
        plain.error, "msg", str(plain.error)
    )
    for name in INTERNAL:
        assert name not in terra.names
