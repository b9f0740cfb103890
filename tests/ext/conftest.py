"""In-process IPython fixtures: one shell for the session, a clean namespace per test."""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import pytest  # noqa: E402

pytest.importorskip("IPython")
pytest.importorskip("tensorflow")

from IPython.core.interactiveshell import InteractiveShell  # noqa: E402

import kernel_ext  # noqa: E402


@pytest.fixture
def ip():
    """The session's InteractiveShell with terra_nb loaded and an empty user namespace."""
    shell = InteractiveShell.instance()
    shell.reset(new_session=False)
    kernel_ext.unload_ipython_extension(shell)
    shell.config.pop("TerraMagics", None)  # settings a test made with %config
    kernel_ext.load_ipython_extension(shell)  # fresh magics: default settings, empty cache
    yield shell
    shell.reset(new_session=False)


@pytest.fixture
def no_views(monkeypatch):
    """terra_nb.views cannot be imported: the extension must fall back to text."""
    import terra_nb

    monkeypatch.delattr(terra_nb, "views", raising=False)
    monkeypatch.setitem(sys.modules, "terra_nb.views", None)
