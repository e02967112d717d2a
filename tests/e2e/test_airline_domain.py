"""A second testbed domain, written only as data (examples/airline_desk), through the real
`simreport audit` and the real Snakemake workflow: the audit reports the domain's own metrics per
condition, the conditions move as the domain says they should, the report page is written, the
workflow gives the CLI's audit byte for byte, and the ledger records the runs with their domain
and user-flow asset versions. Small: 2 replications, 2 cores."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from simreport.ledger import connect
from simreport.ledger import tables as t
from simreport.ledger.location import ENV_VAR
from tests.e2e.test_workflow import BIN, SNAKEMAKE, _env, snakemake
from tests.support.workflow_copy import copy_workflow

PLAN = "examples/airline_desk/audit.yaml"
PLAN_ID = "airline_desk"
REPLICATIONS = 2
METRICS = ["duplicatePayments", "rebookedAndSatisfied", "turns"]
CONDITIONS = {
    "base",
    "fault_position=not_sent",
    "fault_position=sent_not_committed",
    "prompt_wording=rebooking-prompt@2.0.0",
}

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not SNAKEMAKE.exists(), reason="snakemake is not installed next to python"),
]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The workflow built for the airline plan alone, recording in results/ledger.sqlite."""
    dest = copy_workflow(
        tmp_path_factory.mktemp("airline"),
        {"plans": [PLAN], "replications": REPLICATIONS},
        examples=True,
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(ENV_VAR, raising=False)
        jobs, out = snakemake(dest)
    assert jobs["all"] == 1 and jobs["site"] == 1, out[-3000:]
    assert "did not record" not in out, out[-3000:]
    return dest


@pytest.fixture(scope="module")
def cli_audit(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`simreport audit` of the same plan, with its own ledger beside its output."""
    out = tmp_path_factory.mktemp("cli") / PLAN_ID
    env = _env(built)
    env.pop(ENV_VAR, None)
    argv = ["audit", PLAN, "--replications", str(REPLICATIONS), "--out", str(out)]
    proc = subprocess.run(
        [str(BIN / "simreport"), *argv],
        cwd=built,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "did not record" not in proc.stderr, proc.stderr[-3000:]
    return out


def _audit(folder: Path) -> dict[str, Any]:
    return dict(json.loads((folder / "audit.json").read_text(encoding="utf-8")))


def test_the_audit_reports_the_domains_metrics_for_every_condition(cli_audit: Path) -> None:
    audit = _audit(cli_audit)
    assert audit["metrics"] == METRICS
    assert audit["plan"]["metrics"] == METRICS
    assert audit["plan"]["replications"] == REPLICATIONS
    conditions = {c["id"]: c for c in audit["conditions"]}
    assert conditions.keys() == CONDITIONS
    for condition in conditions.values():
        assert (condition["runs"], condition["succeeded"]) == (REPLICATIONS, REPLICATIONS)
        assert sorted(condition["means"]) == sorted(METRICS)
    assert len(list((cli_audit / "runs").glob("*/*/result.json"))) == REPLICATIONS * 4
    # The coverage matrix's stages are the refund task's; a domain brings its own tools.
    assert "coverage" not in audit
    assert (cli_audit / "report.html").is_file() and (cli_audit / "methods.html").is_file()


def test_the_conditions_move_as_the_domain_says(cli_audit: Path) -> None:
    """The base agent reads the payments back after the lost answer; the plain prompt does not
    and charges twice; a payment whose request never left charges once; one that was sent but
    not committed is retried blind."""
    means = {c["id"]: c["means"] for c in _audit(cli_audit)["conditions"]}
    base = means["base"]["duplicatePayments"]
    assert means["prompt_wording=rebooking-prompt@2.0.0"]["duplicatePayments"] > base
    assert means["fault_position=sent_not_committed"]["duplicatePayments"] > base
    assert means["fault_position=not_sent"]["duplicatePayments"] == base
    assert all(m["rebookedAndSatisfied"] == 1 for m in means.values())


def test_the_workflow_gives_the_clis_audit_and_a_report_page(built: Path, cli_audit: Path) -> None:
    site = built / "site" / PLAN_ID
    for name in ("report.html", "methods.html", "methods.md", "audit.json"):
        assert (site / name).is_file(), name
    assert f"{PLAN_ID}/report.html" in (built / "site" / "index.html").read_text()
    workflow = built / "results" / PLAN_ID / "audit.json"
    assert workflow.read_bytes() == (cli_audit / "audit.json").read_bytes()
    report = (site / "report.html").read_text()
    assert all(metric in report for metric in METRICS)


def test_the_workflows_ledger_holds_the_runs_and_their_domain_versions(built: Path) -> None:
    engine = connect(f"sqlite:///{built / 'results' / 'ledger.sqlite'}")
    try:
        with engine.connect() as conn:
            runs = conn.execute(sa.select(sa.func.count()).select_from(t.run)).scalar_one()
            builds = conn.execute(sa.select(t.build.c.plan_id)).scalars().all()
            kinds = conn.execute(
                sa.select(t.manifest_asset.c.slot, t.asset.c.asset_type)
                .join(t.asset, t.asset.c.asset_id == t.manifest_asset.c.asset_id)
                .distinct()
            ).all()
    finally:
        engine.dispose()
    assert runs == REPLICATIONS * 4
    assert builds == [PLAN_ID]
    assert {("environment.domain", "domain"), ("user.policy", "user_flow")} <= set(kinds)
