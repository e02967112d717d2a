"""The coverage matrix (design §六): stage × behaviour × permission × fault from an audit's
conditions, in audit.json with its empty cells named, and in the report."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from simreport.analysis.coverage import (
    ConditionSpec,
    cell_name,
    condition_cells,
    coverage_matrix,
)
from simreport.cli import main
from tests.report.page_structure import part, tables
from tests.report.test_html_validity import VNU, needs_vnu
from tests.support.browser import needs_chromium, render

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "refund_desk"
SUBMIT = {"get_order": "get_order", "create_refund": "create_refund", "get_refund": "get_refund"}
WITHDRAW = {**SUBMIT, "withdraw_refund": "withdraw_refund"}


def _scenario(disclosure: str = "on-request", *, withdraws: bool = False, **trigger: Any) -> dict:
    rules = [{"when": "agent.asks_to_wait", "effect": "withdraw_request"}] if withdraws else []
    return {
        "sut": {"agent": "a@1"},
        "user": {"disclosure": {"orderNumber": disclosure}, "behavior": {"reactionRules": rules}},
        "events": {"triggers": [trigger] if trigger else []},
    }


def test_one_condition_covers_its_stages_behaviours_and_fault() -> None:
    spec = ConditionSpec(
        "base",
        _scenario(target="create_refund", effect="timeout", position="not_sent"),
        SUBMIT,
    )
    assert condition_cells(spec) == {
        ("lookup", "discloses_on_request", "submit_only", "none"),
        ("submission", "discloses_on_request", "submit_only", "timeout@not_sent"),
        ("status_check", "discloses_on_request", "submit_only", "none"),
    }


def test_a_small_audit_names_its_empty_cells() -> None:
    specs = [
        ConditionSpec("base", _scenario("upfront"), SUBMIT),
        ConditionSpec(
            "w", _scenario(withdraws=True, target="create_refund", effect="delay"), WITHDRAW
        ),
    ]
    matrix = coverage_matrix(specs)
    cells = {(c["stage"], c["behaviour"], c["permission"], c["fault"]): c for c in matrix["cells"]}
    assert len(cells) == 4 * 4 * 2 * 9
    assert cells[("lookup", "discloses_upfront", "submit_only", "none")]["conditions"] == ["base"]
    assert cells[("submission", "withdraws", "submit_and_withdraw", "delay")]["status"] == "covered"
    # Never tested: a withdrawal struck by a timeout.
    gap = ("withdrawal", "withdraws", "submit_and_withdraw", "timeout@not_sent")
    assert cells[gap]["status"] == "empty"
    assert cell_name(*gap) in matrix["empty"]
    # A stage the permission does not offer is no gap.
    na = cells[("withdrawal", "withdraws", "submit_only", "none")]
    assert na["status"] == "not_applicable" and cell_name(*na_key(na)) not in matrix["empty"]
    assert matrix["covered"] + matrix["emptyCount"] + matrix["notApplicable"] == len(cells)
    assert matrix["emptyCount"] == len(matrix["empty"])


def na_key(cell: dict[str, Any]) -> tuple[str, str, str, str]:
    return (cell["stage"], cell["behaviour"], cell["permission"], cell["fault"])


def test_a_condition_whose_contracts_cannot_be_read_is_named_not_guessed() -> None:
    matrix = coverage_matrix(
        [ConditionSpec("x", _scenario(), None, "refund-api/1.5.0.yaml is gone")]
    )
    assert matrix["covered"] == 0
    assert matrix["unread"] == [{"condition": "x", "reason": "refund-api/1.5.0.yaml is gone"}]


@pytest.fixture(scope="module")
def audit_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("coverage") / "withdraw"
    code = main(
        ["audit", str(EXAMPLE / "withdraw-audit.yaml"), "--replications", "1", "--out", str(out)]
    )
    assert code == 0
    return out


def test_audit_json_has_the_coverage_key_with_empty_cells(audit_dir: Path) -> None:
    audit = json.loads((audit_dir / "audit.json").read_text())
    coverage = audit["coverage"]
    assert coverage["unread"] == []
    covered = [c for c in coverage["cells"] if c["status"] == "covered"]
    assert {c["permission"] for c in covered} == {"submit_and_withdraw"}
    assert any(c["behaviour"] == "withdraws" and c["stage"] == "withdrawal" for c in covered)
    assert (
        "stage=submission · behaviour=withdraws · permission=submit_and_withdraw · fault=abort"
        in coverage["empty"]
    )


def test_the_coverage_matrix_is_deterministic(audit_dir: Path, tmp_path: Path) -> None:
    first = json.loads((audit_dir / "audit.json").read_text())["coverage"]
    assert main(["analyse", str(audit_dir)]) == 0
    assert json.loads((audit_dir / "audit.json").read_text())["coverage"] == first


def test_the_report_shows_the_coverage_section(audit_dir: Path) -> None:
    html = (audit_dir / "report.html").read_text(encoding="utf-8")
    # A table per permission state, captioned with it.
    permissions = json.loads((audit_dir / "audit.json").read_text())["coverage"]["axes"][
        "permission"
    ]
    shown = [t for t in tables(part(html, "coverage")) if t.caption]
    assert [t.caption.split()[-1] for t in shown[: len(permissions)]] == permissions
    assert "submit_and_withdraw" in permissions
    assert (
        "stage=withdrawal · behaviour=withdraws · permission=submit_and_withdraw · fault=abort"
        in html
    )
    assert html.index('id="coverage"') > html.index('id="h-integrity"')


def test_other_audits_have_no_coverage_key(tmp_path: Path) -> None:
    out = tmp_path / "pd"
    plan = Path(__file__).resolve().parents[2] / "examples" / "prisoners_dilemma" / "audit.yaml"
    assert main(["audit", str(plan), "--replications", "1", "--out", str(out)]) == 0
    assert "coverage" not in json.loads((out / "audit.json").read_text())


@needs_vnu
def test_the_report_with_the_coverage_matrix_is_valid_html(audit_dir: Path) -> None:
    proc = subprocess.run(
        [
            "java",
            "-jar",
            str(VNU),
            "--format",
            "json",
            "--errors-only",
            str(audit_dir / "report.html"),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    messages = json.loads(proc.stderr or '{"messages": []}')["messages"]
    assert messages == [], json.dumps(messages, indent=1)[:3000]


@pytest.mark.slow
@needs_chromium
def test_chromium_shows_the_testbed_sections_of_the_report(audit_dir: Path, tmp_path: Path) -> None:
    """User-simulator quality, cost by segment and the coverage matrix, as a reader sees them:
    rendered offline, each with its heading and table."""
    page = render((audit_dir / "report.html").resolve().as_uri(), tmp_path / "chromium")
    page.check_screenshot(min_bytes=50_000, size=(1280, 2000))
    assert page.network_requests == []
    for heading in (
        "User-simulator quality",
        "Cost by segment: the system under test and the simulation",
        "Coverage matrix: stage × behaviour × permission × fault",
    ):
        assert heading in page.dom
    coverage = page.dom[page.dom.index('id="coverage"') :]
    assert "<table" in coverage and "withdrawal" in coverage
