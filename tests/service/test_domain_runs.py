"""A domain written only as data (the airline rebooking desk) runs through the run service as the
refund desk does: submitted and started over HTTP, executed by a worker, its observations and
metrics served from the ledger. On SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.service.in_process import Api, in_process_api
from tests.support.service_helpers import Worker

AIRLINE = Path(__file__).resolve().parents[2] / "examples" / "airline_desk"


def airline_spec(prompt: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load((AIRLINE / "scenario.yaml").read_text(encoding="utf-8"))
    if prompt is not None:
        spec["sut"]["prompt"] = prompt
    return spec


def observed(api: Api, run_id: str) -> dict[str, Any]:
    package = api.get(f"/runs/{run_id}/evidence")
    assert package.status_code == 200, package.text
    return {o["fact_key"]: o["value"] for o in package.json()["observations"]}


@pytest.mark.parametrize(
    ("prompt", "payments"),
    [(None, 1), ("rebooking-prompt@2.0.0", 2)],
    ids=["verifying-prompt", "plain-prompt"],
)
def test_an_airline_run_executes_through_the_service(
    ledger_url: str, tmp_path: Path, prompt: str | None, payments: int
) -> None:
    with in_process_api(ledger_url, tmp_path, example=AIRLINE) as api:
        scenario_id = api.scenario("airline", airline_spec(prompt), version="1.0.0")
        started = api.run(scenario_id, version="1.0.0")
        run_id = started["run_id"]
        worker = Worker(ledger_url, api.library, max_runs=1)
        worker.join()
        assert worker.outcomes == [(run_id, "completed")]
        status = api.get(f"/runs/{run_id}").json()
        assert (status["execution_status"], status["validity_status"]) == ("completed", "valid")
        assert status["evidence_status"] == "complete"
        facts = observed(api, run_id)
        # The payment's answer was lost: the verifying prompt reads the payments back, the
        # plain one charges again.
        assert facts["payment.count"] == payments
        assert facts["booking.status"] == "rebooked"
        manifest = api.get(f"/manifests/{started['manifest_id']}").json()
        kinds = {slot: entry["kind"] for slot, entry in manifest["resolved"].items()}
        assert kinds["environment.domain"] == "domain"
        assert kinds["user.policy"] == "user_flow"
