"""The refund desk over its domain (domain.yaml) gives, run by run, the metrics its hand-written
fact model gave: 35 runs of the example scenarios (the lost answer at each of the three timeout
positions, and the withdrawal), recorded before the re-expression (the fixture)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from simreport.core.overrides import set_path
from simreport.kernel import load_scenario, run_scenario, validate_scenario

ROOT = Path(__file__).resolve().parents[4]
EXAMPLE = ROOT / "examples" / "refund_desk"
FIXTURE = json.loads(
    (ROOT / "tests" / "fixtures" / "refund_desk_metrics_before_domain.json").read_text()
)
CASES = [
    pytest.param(case, replication, id=f"{case['scenario']}-{pos}-{replication}")
    for case in FIXTURE["cases"]
    for pos in [case["overrides"].get("events.triggers.0.position", "base")]
    for replication in case["metrics"]
]


def same(recorded: Any, now: float) -> bool:
    return (recorded == "nan" and math.isnan(now)) or recorded == now


@pytest.mark.parametrize(("case", "replication"), CASES)
def test_each_run_gives_the_metrics_the_fact_model_gave(
    tmp_path: Path, case: dict[str, Any], replication: str
) -> None:
    doc = load_scenario(EXAMPLE / case["scenario"]).scenario.to_doc()
    # As an audit runs replication r: temperature 0, seed path [r].
    overrides = {
        **case["overrides"],
        "llm.temperature": 0.0,
        "seedPath": [int(replication)],
        "replicationId": int(replication),
    }
    for path, value in overrides.items():
        doc = set_path(doc, path, value)
    result = run_scenario(validate_scenario(doc), tmp_path / "run", asset_root=EXAMPLE)
    assert result.failure is None
    expected = case["metrics"][replication]
    got = {name: result.metrics[name] for name in expected}
    assert all(same(expected[name], got[name]) for name in expected), (expected, got)
