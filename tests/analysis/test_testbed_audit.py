"""The testbed through the audit machinery: the CLI runs the example plan, audit.json gains a
`testbed` section (verdicts, validity exclusions, zero-violation bounds), the report shows it, and
runs of a scenario whose fault never hits stay out of the statistics."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from simreport.analysis.provenance import OFFLINE_STAND_IN
from simreport.analysis.stats import zero_violation_upper_bound
from simreport.analysis.testbed_summary import EvaluatedRun, fault_problems, summarise_testbed
from simreport.cli import main
from simreport.core.schema import RunResult
from simreport.report.html import render_report
from tests.report.page_structure import part, tables
from tests.support.audits import with_provenance

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "refund_desk"
NEVER_HIT = fault_problems({"refund-timeout": ("planned", "armed")})[0]
"""Why a run whose planned fault was armed but never hit stays out of the statistics."""


@pytest.fixture(scope="module")
def audit_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("audit") / "refund"
    code = main(["audit", str(EXAMPLE / "audit.yaml"), "--replications", "2", "--out", str(out)])
    assert code == 0
    return out


def load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def test_cli_audit_runs_every_condition_with_evaluations(audit_dir: Path) -> None:
    audit = load(audit_dir / "audit.json")
    conditions = load(audit_dir / "conditions.json")
    assert len(audit["runs"]) == 2 * len(conditions)
    rows = {(row["condition"], row["replication"]): row for row in audit["runs"]}
    for cond in conditions:
        for r in range(2):
            run = audit_dir / "runs" / cond["dir"] / str(r)
            # The audit's evaluation step judged the run after it ran; the run itself did not.
            evaluation = load(run / "evaluation.json")
            assert evaluation["evaluator"]["sha256"] and evaluation["spec"]["sha256"]
            assert load(run / "result.json")["status"]["quality"] is None
            assert rows[(cond["id"], r)]["status"]["quality"] == evaluation["qualityRef"]
            assert (run / "records.jsonl").is_file()
    assert set(audit["metrics"]) == {
        "duplicateRefunds",
        "wrongAmountRefunds",
        "blindRetries",
        "acceptedAndSatisfied",
        "turns",
        "complaint",
    }


def test_audit_json_has_the_testbed_section(audit_dir: Path) -> None:
    audit = load(audit_dir / "audit.json")
    testbed = audit["testbed"]
    assert testbed["criteria"] == sorted(testbed["criteria"])
    assert "no_duplicate_refund" in testbed["criteria"]
    rows = {row["condition"]: row for row in testbed["conditions"]}
    assert list(rows) == [c["id"] for c in audit["conditions"]]
    # A user who never gives the order number never reaches the planned fault: every such run
    # is violated, excluded from the statistics and never judged.
    never = rows["order_number_disclosure=never"]
    assert never["validityExcluded"] == 2 and never["evaluated"] == 0
    cond = next(c for c in audit["conditions"] if c["id"] == "order_number_disclosure=never")
    assert cond["excluded"] == 2
    assert all(
        not run["used"] and run["status"]["validity"] == "violated"
        for run in audit["runs"]
        if run["condition"] == "order_number_disclosure=never"
    )
    assert testbed["validityExcluded"] == 2
    # Each of them says why: the planned fault never hit (issue 14, item 6).
    assert {
        run["excludedBecause"]
        for run in audit["runs"]
        if run["condition"] == "order_number_disclosure=never"
    } == {NEVER_HIT}
    base = rows["base"]
    for cell in base["criteria"].values():
        assert cell["pass"] + cell["fail"] + cell["undecidable"] + cell["notApplicable"] == 2
        if cell["decided"] and cell["fail"] == 0:
            assert cell["zeroViolationUpperBound"] == pytest.approx(
                1 - 0.05 ** (1 / cell["decided"])
            )
        else:
            assert cell["zeroViolationUpperBound"] is None


def test_report_opens_with_the_headline_and_names_who_decided(audit_dir: Path) -> None:
    from markupsafe import escape

    audit = json.loads((audit_dir / "audit.json").read_text(encoding="utf-8"))
    html = (audit_dir / "report.html").read_text(encoding="utf-8")
    headline = str(escape(audit["verdict"]["headline"]))
    assert html.index(headline) < html.index('id="h-plan-summary"')
    # Every metric is named, and the condition whose fault never hit is named with its cause.
    for metric in audit["metrics"]:
        assert metric in audit["verdict"]["headline"]
    assert NEVER_HIT in audit["verdict"]["headline"]
    assert " more " not in audit["verdict"]["headline"]
    # Who decided: the agent under test by its pin, the offline stand-in for the model calls.
    decided = audit["provenance"]["decisions"]
    assert any("refund-agent@stable" in who for who in decided)
    assert any(OFFLINE_STAND_IN in who for who in decided)
    assert all(str(escape(who)) in html for who in decided)


def test_report_shows_the_testbed_tables(audit_dir: Path) -> None:
    html = (audit_dir / "report.html").read_text(encoding="utf-8")
    testbed = load(audit_dir / "audit.json")["testbed"]
    # A table per criterion: each condition's evaluated runs and validity exclusions.
    shown = {t.caption.split(":")[0]: t for t in tables(part(html, "testbed")) if t.caption}
    for criterion in testbed["criteria"]:
        rows = shown[criterion].rows[1:]
        assert [row[1:3] for row in rows] == [
            [str(c["evaluated"]), str(c["validityExcluded"])] for c in testbed["conditions"]
        ]
    # The problem-runs table says why each run of the fault that never hit is out.
    assert any(row[-1] == NEVER_HIT for table in tables(html) for row in table.rows)
    # The eight sections keep their order; the testbed sits inside section 8.
    positions = [html.index(f'id="h-{s}"') for s in ("plan-summary", "axes", "integrity")]
    assert positions == sorted(positions)
    assert html.index('id="testbed"') > html.index('id="h-integrity"')


def test_other_audits_have_no_testbed_section() -> None:
    from simreport.analysis.audit import RunRecord, analyse

    plan = {"hash": "ab" * 32, "metrics": ["x"], "replications": 1, "axes": []}
    conditions = [{"id": "base", "baseId": "base", "isBase": True}]
    result = RunResult.model_validate(
        {
            "condition": "base",
            "replication": 0,
            "seedPath": [0],
            "status": {"execution": "completed", "validity": "unchecked", "evidence": "complete"},
            "metrics": {"x": 1.0},
            "integrity": {"complete": True, "counters": {}},
        }
    )
    audit = analyse(plan, conditions, [RunRecord("base", 0, result)])
    assert "testbed" not in audit
    assert 'id="testbed"' not in render_report(with_provenance(audit))


def _result(validity: str, evidence: str = "complete", complete: bool = True) -> RunResult:
    return RunResult.model_validate(
        {
            "condition": "c",
            "replication": 0,
            "seedPath": [0],
            "status": {"execution": "completed", "validity": validity, "evidence": evidence},
            "integrity": {"complete": complete, "counters": {}},
        }
    )


def _evaluation(**verdicts: str) -> dict[str, Any]:
    return {"criteria": {k: {"verdict": v} for k, v in verdicts.items()}}


def test_summarise_testbed_counts_verdicts_and_bounds() -> None:
    conditions = [{"id": "base"}, {"id": "c"}]
    runs = [
        EvaluatedRun("base", _result("valid"), _evaluation(a="pass", b="fail")),
        EvaluatedRun("base", _result("valid"), _evaluation(a="pass", b="undecidable")),
        EvaluatedRun("base", _result("violated"), _evaluation(a="undecidable", b="undecidable")),
        EvaluatedRun("c", _result("valid"), _evaluation(a="not_applicable", b="pass")),
        EvaluatedRun("c", None, None),
    ]
    summary = summarise_testbed(conditions, runs)
    assert summary is not None
    base, other = summary["conditions"]
    assert base["validityExcluded"] == 1 and base["evaluated"] == 2
    assert base["criteria"]["a"]["zeroViolationUpperBound"] == zero_violation_upper_bound(2)
    assert base["criteria"]["b"]["zeroViolationUpperBound"] is None
    assert base["criteria"]["b"]["violationRate"] == 1.0
    assert base["criteria"]["b"]["undecidable"] == 1
    assert other["notEvaluated"] == 1
    assert other["criteria"]["a"]["notApplicable"] == 1
    assert other["criteria"]["a"]["zeroViolationUpperBound"] is None
    assert summary["undecidable"] == 1 and summary["validityExcluded"] == 1
    # Totals over conditions are counts: no rate, no bound (issue 14, item 5).
    assert summary["totals"]["a"] == {
        "pass": 2,
        "fail": 0,
        "undecidable": 0,
        "notApplicable": 1,
        "decided": 2,
    }
    assert summarise_testbed(conditions, [EvaluatedRun("base", _result("valid"), None)]) is None


def test_zero_violation_bound_matches_the_design_table() -> None:
    for n, bound in ((10, 0.26), (30, 0.095), (100, 0.030), (300, 0.010), (1000, 0.003)):
        value = zero_violation_upper_bound(n)
        assert value is not None and math.isclose(value, bound, rel_tol=0.03)


def test_runs_with_incomplete_evidence_are_excluded_from_the_bound() -> None:
    conditions = [{"id": "base"}]
    runs = [
        EvaluatedRun("base", _result("valid"), _evaluation(a="pass")),
        EvaluatedRun("base", _result("valid", evidence="partial"), _evaluation(a="pass")),
        EvaluatedRun("base", _result("valid", complete=False), _evaluation(a="pass")),
        EvaluatedRun("base", _result("violated", evidence="partial"), _evaluation(a="undecidable")),
    ]
    summary = summarise_testbed(conditions, runs)
    assert summary is not None
    (base,) = summary["conditions"]
    assert base["evaluated"] == 1
    assert base["validityExcluded"] == 1
    assert base["evidenceExcluded"] == 2
    assert base["criteria"]["a"]["pass"] == 1 and base["criteria"]["a"]["decided"] == 1
    assert base["criteria"]["a"]["zeroViolationUpperBound"] == zero_violation_upper_bound(1)
    assert summary["evidenceExcluded"] == 2 and summary["validityExcluded"] == 1
    assert summary["totals"]["a"]["pass"] == 1
