"""Fixtures for the view tests; the builders live in ``view_fixtures``."""

import pytest
from system_tools import needs_dot  # noqa: F401 - a fixture for the view tests
from view_fixtures import make_graph

from terra_nb.trace.tracegraph import TraceGraph


@pytest.fixture
def graph() -> TraceGraph:
    return make_graph()
