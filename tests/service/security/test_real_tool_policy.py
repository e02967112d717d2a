"""A run of real tools over the run service (SPEC §11a): a spec names sandboxes, the operator's
policy declares them. A hybrid spec whose sandbox the policy does not declare is refused
located when it is submitted; a run request's mode must be the scenario's backendMode. In
process: the service on a fresh ledger, no worker (nothing here needs to run)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.service.in_process import in_process_api

AIRLINE = Path(__file__).resolve().parents[3] / "examples" / "airline_desk"


def hybrid_spec() -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load((AIRLINE / "scenario.yaml").read_text(encoding="utf-8"))
    spec["environment"]["backendMode"] = "hybrid"
    spec["environment"]["realTools"] = {"pay_fare_difference": "payments"}
    spec["execution"]["mode"] = "hybrid"
    return spec


def _policy(folder: Path) -> Path:
    path = folder / "policy.yaml"
    sandbox = {"baseUrl": "http://127.0.0.1:9", "apiKeyEnv": "PAYMENTS_SANDBOX_KEY"}
    path.write_text(yaml.safe_dump({"sandboxes": {"payments": sandbox}}), encoding="utf-8")
    return path


def test_a_hybrid_run_of_declared_sandboxes_is_accepted_in_its_own_mode_only(
    ledger_url: str, tmp_path: Path
) -> None:
    with in_process_api(ledger_url, tmp_path, AIRLINE, _policy(tmp_path)) as api:
        scenario_id = api.scenario("airline", hybrid_spec(), version="1.0.0")
        started = api.post("/runs", {"scenario_id": scenario_id, "version": "1.0.0"})
        assert started.status_code == 422, started.text
        assert [i["path"] for i in started.json()["error"]["issues"]] == ["mode"]
        api.run(scenario_id, version="1.0.0", mode="hybrid")


def test_a_sandbox_the_policy_does_not_declare_is_refused_located(
    ledger_url: str, tmp_path: Path
) -> None:
    with in_process_api(ledger_url, tmp_path, AIRLINE) as api:
        owner = {"namespace": "support", "name": "airline", "owner": "qa", "risk_level": "low"}
        scenario_id = api.post("/scenarios", owner).json()["scenario_id"]
        submitted = api.post(
            f"/scenarios/{scenario_id}/versions", {"version": "1.0.0", "spec": hybrid_spec()}
        )
        assert submitted.status_code == 422, submitted.text
        paths = [i["path"] for i in submitted.json()["error"]["issues"]]
        assert paths == ["spec.environment.realTools.pay_fare_difference"]
        assert submitted.json()["error"]["code"] == "not_allowed"
