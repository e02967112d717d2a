"""A run of real tools over the run service (SPEC §11a): a spec names sandboxes, the operator's
policy declares them. A hybrid spec whose sandbox the policy does not declare is refused
located when it is submitted; a run request's mode must be the scenario's backendMode. In
process: the service on a fresh ledger, no worker (nothing here needs to run)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import yaml

from simreport.ledger import connect
from simreport.ledger import tables as t
from simreport.service.run_process import RunProcess
from tests.service.in_process import in_process_api
from tests.support.payments_sandbox import TOKEN, Sandbox
from tests.support.service_helpers import Worker

AIRLINE = Path(__file__).resolve().parents[3] / "examples" / "airline_desk"


def hybrid_spec() -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load((AIRLINE / "scenario.yaml").read_text(encoding="utf-8"))
    spec["environment"]["backendMode"] = "hybrid"
    spec["environment"]["realTools"] = {"pay_fare_difference": "payments"}
    spec["execution"]["mode"] = "hybrid"
    return spec


def _policy(folder: Path, url: str = "http://127.0.0.1:9") -> Path:
    path = folder / "policy.yaml"
    sandbox = {"baseUrl": url, "apiKeyEnv": "PAYMENTS_SANDBOX_KEY"}
    path.write_text(yaml.safe_dump({"sandboxes": {"payments": sandbox}}), encoding="utf-8")
    return path


@contextmanager
def _hybrid_run_executed(ledger_url: str, tmp_path: Path) -> Iterator[Any]:
    """A hybrid airline run started over HTTP and executed by a worker under a policy that
    declares a payments sandbox: (the API, the sandbox, the run's id, the worker's outcomes)."""
    sandbox = Sandbox()
    try:
        policy = _policy(tmp_path, sandbox.url)
        with in_process_api(ledger_url, tmp_path, AIRLINE, policy) as api:
            scenario_id = api.scenario("airline", hybrid_spec(), version="1.0.0")
            run_id = api.run(scenario_id, version="1.0.0", mode="hybrid")["run_id"]
            worker = Worker(ledger_url, api.library, max_runs=1, policy=policy)
            worker.join()
            yield api, sandbox, run_id, worker.outcomes
    finally:
        sandbox.close()


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


def test_a_worker_runs_a_hybrid_run_against_the_operator_s_sandbox(
    ledger_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole path: submitted and started over HTTP, executed by a worker under the same
    policy, the payment sent to the sandbox with the operator's key, which no run data holds.
    The fork server that run processes come from is started before the key is set: the worker
    sends its key with each run, as its environment has it then."""
    RunProcess("before-the-key").close()
    monkeypatch.setenv("PAYMENTS_SANDBOX_KEY", TOKEN)
    with _hybrid_run_executed(ledger_url, tmp_path) as (api, sandbox, run_id, outcomes):
        assert outcomes == [(run_id, "completed")]
        status = api.get(f"/runs/{run_id}").json()
        assert (status["execution_status"], status["validity_status"]) == (
            "completed",
            "valid",
        )
        assert [p["bookingId"] for p in sandbox.payments] == ["KX4821"]
        assert {auth for _, _, auth in sandbox.requests} == {f"Bearer {TOKEN}"}
        events = api.get(f"/runs/{run_id}/events", limit=1000).json()
        text = json.dumps(events)
        assert TOKEN not in text and '"backend": "real"' in text
        # The run's records carry the trace id its row was given when it was started.
        engine = connect(ledger_url)
        try:
            with engine.connect() as conn:
                row = conn.execute(
                    sa.select(t.run.c.trace_id).where(t.run.c.run_id == run_id)
                ).scalar_one()
        finally:
            engine.dispose()
        traced = [e["trace_id"] for e in events["events"] if e["trace_id"] is not None]
        assert traced and set(traced) == {row}


def test_a_key_the_worker_no_longer_has_is_not_taken_from_an_older_fork_server(
    ledger_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fork server starts while the worker's environment holds the key; the key is gone
    when the run is sent: the run goes without it and fails in LOADING, and the sandbox is
    never called."""
    monkeypatch.setenv("PAYMENTS_SANDBOX_KEY", TOKEN)
    RunProcess("with-the-key").close()
    monkeypatch.delenv("PAYMENTS_SANDBOX_KEY")
    with _hybrid_run_executed(ledger_url, tmp_path) as (api, sandbox, run_id, outcomes):
        assert outcomes != [(run_id, "completed")]
        assert api.get(f"/runs/{run_id}").json()["execution_status"] != "completed"
        assert sandbox.requests == []
        events = api.get(f"/runs/{run_id}/events", limit=1000).json()
        assert "sandbox_credentials_missing" in json.dumps(events)
