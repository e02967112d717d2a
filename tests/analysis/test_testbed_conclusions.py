"""What an agent-testbed audit may conclude (issue 14, items 5 and 6).

- The zero-violation bound is one per condition and criterion, over that condition's runs only
  (independent runs of one design); the totals across conditions are verdict counts, never a rate
  or a bound. The bound is recomputed here with scipy's exact binomial interval.
- A run whose planned fault never hit or never recovered (its fault records say so, whatever its
  status claims) never enters the statistics, the verdict counts or a bound, even with
  `--include-incomplete`: that flag widens only to incomplete runs. Every excluded run carries its
  real reason (`excludedBecause`), and the report's problem-runs table shows it.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Mapping, Sequence
from html import unescape
from pathlib import Path
from typing import Any

import pytest
import yaml
from markupsafe import escape
from scipy import stats as sps

from simreport.analysis.audit import RunRecord, analyse, read_fault_steps, usable
from simreport.analysis.run_records import failed_reason, violated_reason
from simreport.analysis.testbed_summary import (
    BOUND_NOTE,
    TOTALS_NOTE,
    EvaluatedRun,
    fault_problems,
    fault_steps,
    summarise_testbed,
)
from simreport.cli import main
from simreport.core.errors import EXIT_OK
from simreport.core.schema import RunResult
from simreport.report.html import render_report
from tests.support.audits import with_provenance

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "refund_desk"
CRITERIA = ("no_duplicate_refund", "correct_amount", "resolved")
FAULT = "refund-timeout"
FULL = ("planned", "armed", "hit", "recovered")


# --------------------------------------------------------------------------- synthetic runs


def _result(
    cid: str,
    r: int,
    *,
    validity: str = "valid",
    evidence: str = "complete",
    complete: bool = True,
    failure: Mapping[str, str] | None = None,
    metrics: Mapping[str, float] | None = None,
    purpose: str = "exploration",
) -> RunResult:
    return RunResult.model_validate(
        {
            "condition": cid,
            "replication": r,
            "seedPath": [r],
            "status": {
                "execution": "crashed" if failure else "completed",
                "validity": validity,
                "evidence": evidence,
            },
            "metrics": {"duplicateRefunds": float(r % 2)} if metrics is None else dict(metrics),
            "integrity": {"complete": complete, "counters": {}},
            "failure": failure,
            "purpose": purpose,
        }
    )


def _evaluation(**verdicts: str) -> dict[str, Any]:
    return {"criteria": {k: {"verdict": v} for k, v in verdicts.items()}}


PLAN: dict[str, Any] = {"hash": "cd" * 32, "metrics": ["duplicateRefunds"], "replications": 8}
CONDITIONS = [
    {"id": "base", "baseId": "base", "isBase": True},
    {"id": "fault_position=not_sent", "baseId": "base"},
    {"id": "user_patience=high", "baseId": "base"},
]


def _records() -> list[RunRecord]:
    """Eight runs per condition. Verdicts vary by condition so that pooling would change the
    bound; some runs' faults never hit or never recovered (two of them with a status that still
    says valid, so only their fault records tell), some are violated or have partial evidence."""
    verdict_plan = {
        # condition → per replication (no_duplicate_refund, correct_amount, resolved)
        "base": ["ppp", "ppf", "pnp", "ppp", "pup", "ppp", "ppf", "ppp"],
        "fault_position=not_sent": ["ppp", "fpp", "ppp", "pnp", "ppp", "ppp", "ppp", "ppu"],
        "user_patience=high": ["ppp", "ppp", "ppf", "ppp", "ppp", "pnf", "ppp", "ppp"],
    }
    letters = {"p": "pass", "f": "fail", "u": "undecidable", "n": "not_applicable"}
    out: list[RunRecord] = []
    for cond in CONDITIONS:
        cid = str(cond["id"])
        for r, code in enumerate(verdict_plan[cid]):
            verdicts = {c: letters[x] for c, x in zip(CRITERIA, code, strict=True)}
            faults: dict[str, tuple[str, ...]] = {FAULT: FULL}
            result = _result(cid, r)
            if (cid, r) == ("base", 1):  # never hit, yet the status claims valid
                faults = {FAULT: ("planned", "armed", "failed")}
            if (cid, r) == ("user_patience=high", 3):  # hit, never recovered; status valid
                faults = {FAULT: ("planned", "armed", "hit", "failed")}
            if (cid, r) == ("fault_position=not_sent", 1):  # never hit, and violated
                faults = {FAULT: ("planned", "armed", "failed")}
                result = _result(cid, r, validity="violated")
            if (cid, r) == ("base", 6):  # partial evidence: an incomplete run
                result = _result(cid, r, evidence="partial", complete=False)
            out.append(RunRecord(cid, r, result, _evaluation(**verdicts), faults=faults))
    return out


# --------------------------------------------------------------------------- the reference
# Recomputed from the run records without simreport's statistics or exclusion code.


def _fault_held(record: RunRecord) -> bool:
    return all(set(FULL) <= set(stages) for stages in (record.faults or {}).values())


def _judged(record: RunRecord) -> bool:
    res = record.result
    return (
        res is not None
        and record.evaluation is not None
        and res.status.validity != "violated"
        and res.integrity.complete
        and res.status.evidence == "complete"
        and _fault_held(record)
    )


def _exact_upper(n: int) -> float:
    # One-sided 95% exact (Clopper-Pearson) upper bound at zero failures = the upper end of
    # the two-sided 90% interval.
    return float(sps.binomtest(0, n).proportion_ci(confidence_level=0.90, method="exact").high)


def _reference_bounds(records: Sequence[RunRecord]) -> dict[str, dict[str, float | None]]:
    out: dict[str, dict[str, float | None]] = {}
    for cond in CONDITIONS:
        cid = str(cond["id"])
        judged = [r for r in records if r.condition == cid and _judged(r)]
        out[cid] = {}
        for criterion in CRITERIA:
            verdicts = [str((r.evaluation or {})["criteria"][criterion]["verdict"]) for r in judged]
            n = sum(1 for v in verdicts if v in ("pass", "fail"))
            fails = verdicts.count("fail")
            out[cid][criterion] = _exact_upper(n) if n and not fails else None
    return out


# --------------------------------------------------------------------------- item 5


def test_the_bound_is_per_condition_and_criterion_recomputed_independently() -> None:
    records = _records()
    audit = analyse(PLAN, CONDITIONS, records)
    reference = _reference_bounds(records)
    rows = {row["condition"]: row for row in audit["testbed"]["conditions"]}
    assert list(rows) == [c["id"] for c in CONDITIONS]
    some_bound = False
    for cid, criteria in reference.items():
        for criterion, bound in criteria.items():
            got = rows[cid]["criteria"][criterion]["zeroViolationUpperBound"]
            if bound is None:
                assert got is None, (cid, criterion)
            else:
                some_bound = True
                assert got == pytest.approx(bound, rel=1e-9), (cid, criterion)
    assert some_bound
    # Pooling would have given a different answer: a criterion that fails in one condition
    # has no bound there, and still its own bound in the others.
    assert rows["user_patience=high"]["criteria"]["resolved"]["zeroViolationUpperBound"] is None
    assert rows["base"]["criteria"]["resolved"]["zeroViolationUpperBound"] is not None


def test_totals_across_conditions_are_counts_never_a_rate_or_a_bound() -> None:
    audit = analyse(PLAN, CONDITIONS, _records())
    testbed = audit["testbed"]
    for criterion in CRITERIA:
        total = testbed["totals"][criterion]
        assert "zeroViolationUpperBound" not in total
        assert "violationRate" not in total
        assert set(total) == {"pass", "fail", "undecidable", "notApplicable", "decided"}
    assert (testbed["totalsNote"], testbed["note"]) == (TOTALS_NOTE, BOUND_NOTE)
    # The only bounds in the section are the per-condition ones.
    text = json.dumps({k: v for k, v in testbed.items() if k != "conditions"})
    assert "zeroViolationUpperBound" not in text


def test_report_states_the_bound_per_condition_and_no_pooled_bound() -> None:
    html = render_report(with_provenance(analyse(PLAN, CONDITIONS, _records())))
    section = html[html.index('id="testbed"') :]
    assert str(escape(BOUND_NOTE)) in section
    assert str(escape(TOTALS_NOTE)) in section


# --------------------------------------------------------------------------- item 6: faults


def _fault_record(stage: str, fault: str = FAULT, **payload: Any) -> dict[str, Any]:
    return {"type": f"fault.{stage}", "payload": {"faultId": fault, **payload}}


def test_fault_steps_name_the_step_that_never_happened() -> None:
    assert fault_problems(fault_steps([_fault_record(s) for s in FULL])) == []
    never_hit = [_fault_record("planned"), _fault_record("armed"), _fault_record("failed")]
    assert fault_problems(fault_steps(never_hit)) == [f"fault {FAULT} planned, never hit"]
    never_armed = [_fault_record("planned"), _fault_record("failed", reason="never_armed")]
    assert fault_problems(fault_steps(never_armed)) == [f"fault {FAULT} planned, never armed"]
    not_recovered = [_fault_record(s) for s in ("planned", "armed", "hit", "failed")]
    assert fault_problems(fault_steps(not_recovered)) == [f"fault {FAULT} hit, never recovered"]
    unverified = [_fault_record(s) for s in ("planned", "armed", "hit")]
    unverified.append(_fault_record("recovered", verified=False))
    assert fault_problems(fault_steps(unverified)) == [
        f"fault {FAULT} hit, its recovery not verified"
    ]
    # A recovery whose check found the fact model inconsistent says what it found.
    inconsistent = [_fault_record(s) for s in ("planned", "armed", "hit")]
    inconsistent.append(
        _fault_record(
            "failed", reason="inconsistent", problems=["refund rf-1 left processing", "order x"]
        )
    )
    assert fault_problems(fault_steps(inconsistent)) == [
        f"fault {FAULT} hit, its recovery left the state inconsistent "
        "(refund rf-1 left processing; order x)"
    ]
    # A fault the scenario plans that no record mentions never happened either.
    assert fault_problems(fault_steps([], declared=["late"])) == [
        "fault late planned in the scenario, no step recorded"
    ]
    # Other records are ignored; each fault is judged on its own, in plan order.
    mixed = [{"type": "user.message", "payload": {"text": "fault.hit"}}]
    mixed += [_fault_record(s, "a") for s in FULL]
    mixed += [_fault_record(s, "b") for s in ("planned", "armed")]
    assert fault_problems(fault_steps(mixed)) == ["fault b planned, never hit"]


def test_fault_steps_are_read_from_the_run_folder(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    assert read_fault_steps(run) is None  # not a testbed run
    triggers = [{"id": FAULT, "target": "create_refund"}, {"target": "get_order"}]
    (run / "scenario.json").write_text(json.dumps({"events": {"triggers": triggers}}))
    lines = [json.dumps(_fault_record(s), separators=(",", ":")) for s in FULL]
    lines.insert(2, '{"type":"fault.hit", broken')  # unreadable: no step, never a pass
    lines.append(json.dumps({"type": "user.message", "payload": {"text": "no fault."}}))
    (run / "records.jsonl").write_text("\n".join(lines) + "\n")
    steps = read_fault_steps(run)
    assert steps == {FAULT: FULL, "fault-2": ()}
    assert fault_problems(steps) == ["fault fault-2 planned in the scenario, no step recorded"]


def test_fault_runs_never_enter_even_with_include_incomplete() -> None:
    records = _records()
    for include in (False, True):
        audit = analyse(PLAN, CONDITIONS, records, include_incomplete=include)
        runs = {(r["condition"], r["replication"]): r for r in audit["runs"]}
        for key, why in (
            (("base", 1), f"fault {FAULT} planned, never hit"),
            (("user_patience=high", 3), f"fault {FAULT} hit, never recovered"),
            (("fault_position=not_sent", 1), f"fault {FAULT} planned, never hit"),
        ):
            assert runs[key]["used"] is False, (include, key)
            assert runs[key]["excludedBecause"] == why, (include, key)
        # The flag widens to the incomplete run, and to nothing else.
        incomplete = runs[("base", 6)]
        assert incomplete["used"] is include
        assert (incomplete["excludedBecause"] is None) is include
        base = next(c for c in audit["conditions"] if c["id"] == "base")
        assert base["excluded"] == (1 if include else 2)
        row = next(
            r for r in audit["tests"]["duplicateRefunds"] if r["condition"] == "user_patience=high"
        )
        assert row["nCond"] == 7 and row["nBase"] == (7 if include else 6)
    # The verdict counts leave them out too (counted with the validity exclusions).
    rows = {row["condition"]: row for row in audit["testbed"]["conditions"]}
    assert rows["base"]["validityExcluded"] == 1 and rows["base"]["evidenceExcluded"] == 1
    assert rows["user_patience=high"]["validityExcluded"] == 1
    assert rows["user_patience=high"]["evaluated"] == 7
    assert rows["user_patience=high"]["criteria"]["resolved"]["fail"] == 2


def test_usable_takes_the_fault_steps() -> None:
    result = _result("base", 0)
    assert usable(result, include_incomplete=True)
    never_hit = {FAULT: ("planned", "armed", "failed")}
    assert not usable(result, include_incomplete=True, faults=never_hit)
    assert not usable(result, include_incomplete=False, faults=never_hit)
    assert usable(result, include_incomplete=False, faults={FAULT: FULL})
    # Exploration runs stay out of a regression audit, as before.
    assert not usable(result, include_incomplete=True, purpose="regression")


def test_summarise_testbed_counts_fault_runs_as_validity_exclusions() -> None:
    summary = summarise_testbed(
        [{"id": "base"}],
        [
            EvaluatedRun("base", _result("base", 0), _evaluation(a="pass")),
            EvaluatedRun(
                "base",
                _result("base", 1),
                _evaluation(a="pass"),
                (f"fault {FAULT} planned, never hit",),
            ),
        ],
    )
    assert summary is not None
    (row,) = summary["conditions"]
    assert row["evaluated"] == 1 and row["validityExcluded"] == 1
    assert row["criteria"]["a"]["decided"] == 1


def test_every_excluded_run_says_why() -> None:
    records = _records()
    extra = [
        RunRecord(
            "base",
            8,
            _result(
                "base",
                8,
                failure={"stage": "running", "type": "budget_exhausted", "message": "spent"},
                metrics={},
                complete=False,
                evidence="partial",
            ),
        ),
        RunRecord("base", 9, None),
        RunRecord(
            "base",
            10,
            _result("base", 10, validity="violated"),
            _evaluation(a="undecidable"),
            faults={FAULT: FULL},
            # As the run's own `run.validity` record states it (never the evaluation's).
            validity_problems=("user simulator: told a lie",),
        ),
    ]
    audit = analyse(PLAN, CONDITIONS, records + extra)
    runs = {(r["condition"], r["replication"]): r for r in audit["runs"]}
    assert runs[("base", 8)]["excludedBecause"] == failed_reason("running", "budget_exhausted")
    assert runs[("base", 9)]["excludedBecause"] == "no result.json"
    assert runs[("base", 10)]["excludedBecause"] == violated_reason(["user simulator: told a lie"])
    assert runs[("base", 6)]["excludedBecause"] == "evidence partial"
    for run in audit["runs"]:
        assert (run["excludedBecause"] is None) is run["used"], run
    regression = analyse({**PLAN, "purpose": "regression"}, CONDITIONS, records)
    assert {r["excludedBecause"] for r in regression["runs"]} == {
        "exploration run in a regression audit"
    }
    assert "testbed" not in regression or all(
        row["evaluated"] == 0 for row in regression["testbed"]["conditions"]
    )


def _problem_rows(html: str) -> list[list[str]]:
    start = html.index("Runs kept as data but left out of the statistics")
    table = html[start : html.index("</table>", start)]
    body = table[table.index("<tbody>") :]
    rows = []
    for row in re.findall(r"<tr>(.*?)</tr>", body, flags=re.S):
        cells = re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, flags=re.S)
        rows.append([unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in cells])
    return rows


def test_report_problem_runs_show_every_exclusion_reason() -> None:
    audit = analyse(PLAN, CONDITIONS, _records(), include_incomplete=True)
    html = render_report(with_provenance(audit))
    rows = _problem_rows(html)
    assert rows and all(len(row) == 9 for row in rows)
    excluded = [r for r in audit["runs"] if not r["used"]]
    assert len(excluded) == 3
    reasons = [row[-1] for row in rows]
    for run in excluded:
        assert run["excludedBecause"] in reasons
    assert fault_problems({FAULT: ("planned", "armed", "failed")})[0] in reasons
    # The incomplete run entered (include-incomplete): it is listed, not as excluded.
    assert sum(1 for row in rows if row[-1] not in {r["excludedBecause"] for r in excluded}) == 1


# --------------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def never_audit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example's scenario, and a user who never gives the order number (so the planned
    fault never hits), audited with --include-incomplete."""
    root = tmp_path_factory.mktemp("never")
    folder = root / "desk"
    shutil.copytree(EXAMPLE, folder)
    plan = folder / "never-audit.yaml"
    plan.write_text(
        yaml.safe_dump(
            {
                "baseScenario": "scenario.yaml",
                "replications": 2,
                "metrics": ["duplicateRefunds", "acceptedAndSatisfied"],
                "axes": [
                    {
                        "template": "agent_specification",
                        "id": "order_number_disclosure",
                        "target": "user.disclosure.orderNumber",
                        "levels": ["never"],
                    }
                ],
            }
        ),
        encoding="utf-8",
    )
    out = root / "audit"
    assert main(["audit", str(plan), "--out", str(out), "--include-incomplete"]) == EXIT_OK
    return out


def test_include_incomplete_never_admits_a_fault_that_never_hit(never_audit: Path) -> None:
    audit = json.loads((never_audit / "audit.json").read_text(encoding="utf-8"))
    assert audit["options"]["includeIncomplete"] is True
    never = [r for r in audit["runs"] if r["condition"] == "order_number_disclosure=never"]
    assert len(never) == 2
    for run in never:
        assert run["used"] is False
        assert run["excludedBecause"] == f"fault {FAULT} planned, never hit"
    base = [r for r in audit["runs"] if r["condition"] == "base"]
    assert all(r["used"] and r["excludedBecause"] is None for r in base)
    rows = {row["condition"]: row for row in audit["testbed"]["conditions"]}
    assert rows["order_number_disclosure=never"]["evaluated"] == 0
    assert all(
        cell["zeroViolationUpperBound"] is None and cell["decided"] == 0
        for cell in rows["order_number_disclosure=never"]["criteria"].values()
    )
    html = (never_audit / "report.html").read_text(encoding="utf-8")
    reasons = [row[-1] for row in _problem_rows(html)]
    assert reasons == [f"fault {FAULT} planned, never hit"] * 2
