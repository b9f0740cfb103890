"""Shared by the fault-injection tests: the op counter, the programs, and the session summary
written to ``test-artifacts/fault_injection.json`` (positions tried, faults survived, updates
lost or doubled)."""

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "tf"))  # what_ran, watchdog

ARTIFACT = Path(__file__).parents[2] / "test-artifacts" / "fault_injection.json"


class FaultSummary:
    """Counts per (program, plan, fault): positions tried, faults survived (the run ended as
    eager's did and every value equals eager's), updates lost, updates doubled, other
    mismatches (values that differ without a lost or doubled update)."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, int]] = {}

    def add(self, key: str, **counts: int) -> None:
        row = self.rows.setdefault(key, {})
        for name, value in counts.items():
            row[name] = row.get(name, 0) + value

    def totals(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for row in self.rows.values():
            for name, value in row.items():
                out[name] = out.get(name, 0) + value
        return out

    def write(self) -> None:
        ARTIFACT.parent.mkdir(exist_ok=True)
        ARTIFACT.write_text(json.dumps({"totals": self.totals(), "runs": self.rows}, indent=1))


@pytest.fixture(scope="session")
def fault_summary():
    summary = FaultSummary()
    yield summary
    if summary.rows:
        summary.write()
        print(f"\nfault injection: {summary.totals()} -> {os.path.relpath(ARTIFACT)}")
