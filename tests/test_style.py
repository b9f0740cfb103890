"""The codebase is ruff clean (the README's test command checks style too)."""

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_clean():
    if shutil.which("ruff") is None:
        pytest.skip("ruff is not installed (pip install -e '.[test]')")
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "terra_nb", "kernel_ext", "tests", "benchmarks"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _python_files() -> list[Path]:
    return sorted(p for top in ("terra_nb", "kernel_ext") for p in (ROOT / top).rglob("*.py"))


def test_modules_are_under_400_lines():
    long = {str(p.relative_to(ROOT)): n for p in _python_files()
            if (n := len(p.read_text().splitlines())) > 400}
    assert not long, f"split these modules (one module, one idea): {long}"


def test_functions_are_under_50_lines():
    long = []
    for path in _python_files():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > 50:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines})")
    assert not long, "shorten these functions:\n" + "\n".join(long)


def test_stage_imports_point_one_way():
    """Plain data at the bottom (trace/), then capture/, then coexec/, then regions/ (which uses
    capture and coexec.lower; session and modes sit above it); the engine never imports the
    views or the extension, trace/ never imports TensorFlow and regions/ never IPython."""
    below = {"trace": set(), "capture": {"trace"}, "coexec": {"trace", "capture"},
             "regions": {"trace", "capture", "coexec"}}
    wrong = []
    for stage, allowed in below.items():
        for path in sorted((ROOT / "terra_nb" / stage).glob("*.py")):
            text = path.read_text()
            for other in ("trace", "capture", "coexec", "regions", "views"):
                if other != stage and other not in allowed and re.search(
                        rf"^\s*from \.\.(?:{other}\b| import {other}\b)", text, re.M):
                    wrong.append(f"{stage}/{path.name} imports {other}")
            if stage == "trace" and re.search(r"^\s*(import|from) tensorflow", text, re.M):
                wrong.append(f"trace/{path.name} imports TensorFlow")
            if stage == "regions" and re.search(r"^\s*(import|from) (IPython|kernel_ext)", text,
                                                re.M):
                wrong.append(f"regions/{path.name} imports IPython")
    assert not wrong, wrong


PLACEHOLDER_STATE = {"value", "pending", "item", "queued", "replayed", "failed", "owner"}


def test_only_the_placeholder_writes_its_state():
    """A placeholder's state changes only through its own methods (``resolve``, ``bind``,
    ``replay``, ...), which its owner calls: no other module assigns those fields of another
    object (``self.failed`` of an executor is its own)."""
    wrong = []
    for path in _python_files():
        if path.name == "placeholder.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else [
                node.target] if isinstance(node, ast.AugAssign | ast.AnnAssign) else []
            for target in targets:
                for part in ast.walk(target):
                    if isinstance(part, ast.Attribute) and part.attr in PLACEHOLDER_STATE \
                            and not (isinstance(part.value, ast.Name) and part.value.id == "self"):
                        wrong.append(f"{path.relative_to(ROOT)}:{part.lineno} .{part.attr}")
    assert not wrong, "write a placeholder's state through its methods:\n" + "\n".join(wrong)
