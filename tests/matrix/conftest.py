"""The differential matrix against eager (``tests/matrix``): it reuses ``tests/tf``'s helpers
(``region_programs.run``, ``what_ran``, ``watchdog``), so that folder is put on ``sys.path``.

``TERRA_MATRIX=full`` runs every case; by default only the ``fast`` subset is collected.
"""

import os
import sys

import pytest

pytest.importorskip("tensorflow")
TF_TESTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tf")
if TF_TESTS not in sys.path:
    sys.path.insert(0, TF_TESTS)


def pytest_configure(config):
    config.addinivalue_line("markers", "fast: a case of the matrix's default (fast) subset")


@pytest.fixture(autouse=True)
def _seeded():
    import keras

    keras.utils.set_random_seed(0)


def pytest_terminal_summary(terminalreporter):
    """Every case's record of what ran: its phases and region rows."""
    from matrix_harness import RECORDS

    if RECORDS:
        terminalreporter.section("terra matrix: what ran")
        for case_id, record in RECORDS:
            terminalreporter.write_line(f"{case_id}: {record}")
