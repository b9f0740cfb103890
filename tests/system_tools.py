"""System tools some tests need (Graphviz ``dot``, Chromium): without one a test skips with the
install hint, except in CI (``CI=true``), where ``.ci/run`` installs them all and a skip would
hide a broken install, so the test fails instead."""

from __future__ import annotations

import os
import shutil

import pytest

DOT_MISSING = "Graphviz `dot` is not installed (apt-get install graphviz)"


def in_ci() -> bool:
    return os.environ.get("CI") == "true"


def require(missing: str | None) -> None:
    """Skip (or, in CI, fail) with ``missing`` when it is not None."""
    if missing is None:
        return
    if in_ci():
        pytest.fail(f"cannot run in CI: {missing}")
    pytest.skip(missing)


def require_dot() -> None:
    require(None if shutil.which("dot") else DOT_MISSING)


@pytest.fixture
def needs_dot() -> None:
    """Use as ``@pytest.mark.usefixtures("needs_dot")`` (import it into the conftest)."""
    require_dot()
