"""A token names; the operator decides (SPEC §11a). Against a real `simreport api` with a real
worker process, on SQLite and on PostgreSQL, as a hostile token holder would try it:

- a spec that carries a command (`simulator.command`), a URL or a key variable (`llm.baseUrl`,
  `llm.apiKeyEnv`, also under `user.llm`), a provider or endpoint or model the operator did not
  declare, an agent or participant entry of its own, or an asset library outside the server's is
  refused with a located 422 when it is submitted, and nothing runs;
- a version the operator stored (with a command) is refused when a token starts a run of it;
- a worker whose policy does not declare what a queued run names refuses to execute it;
- what the operator declared works by name: a model endpoint (the key reaches that endpoint and
  nothing else; the ledger records the endpoint's name) and an external simulator (which sees
  only the environment the policy gives it);
- what could never run is refused at submission: an asset that does not resolve, a surrogate or
  script inside the SUT boundary, a setting the testbed does not implement, credentials that
  were redacted.

Every request has a timeout, every wait a deadline; only 127.0.0.1 is used.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from simreport.ledger import connect
from simreport.service.run_process import PolicyRefusal
from tests.service.security.running_service import EXAMPLE, Service, refund_spec
from tests.support.ledgers import POSTGRES_URL, fresh_ledger
from tests.support.llm_server import FakeLLM

pytestmark = pytest.mark.slow

ENDPOINT_KEY = "operator-endpoint-key-5f1e2d3c4b5a"
SIMULATOR = """
import argparse, json, os, pathlib
p = argparse.ArgumentParser()
p.add_argument("--config"); p.add_argument("--seed", type=int); p.add_argument("--out")
a = p.parse_args()
pathlib.Path({marker!r}).write_text("ran")
metrics = {{
    "sawDbPassword": float("DB_PASSWORD" in os.environ),
    "sawDeclared": float(os.environ.get("SIM_THREADS") == "3"),
}}
pathlib.Path(a.out, "result.json").write_text(json.dumps({{
    "status": {{"execution": "completed", "validity": "valid", "evidence": "complete"}},
    "metrics": metrics, "distributions": {{}},
    "integrity": {{"complete": True, "counters": {{}}}},
    "cost": {{"llmCalls": 0, "promptTokens": 0, "completionTokens": 0}}, "failure": None,
}}))
"""


def simulator_spec(**simulator: Any) -> dict[str, Any]:
    return {"simulator": {"metrics": ["sawDbPassword", "sawDeclared"], **simulator}, "steps": 1}


def issues(answer: httpx.Response) -> dict[str, str]:
    """A 422's issues: path → message."""
    assert answer.status_code == 422, answer.text
    return {i["path"]: i["message"] for i in answer.json()["error"]["issues"]}


def code(answer: httpx.Response) -> str:
    return str(answer.json()["error"]["code"])


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLM]:
    with FakeLLM(answer="hash") as server:
        yield server


@pytest.fixture(scope="module")
def setting(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM) -> dict[str, Any]:
    """The library (the refund desk's, the library's parent holding a simulator), the
    operator's policy and the environment the service runs in."""
    tmp = tmp_path_factory.mktemp("policy")
    root = tmp / "refund_desk"
    shutil.copytree(EXAMPLE, root)
    marker = tmp / "simulator.ran"
    (tmp / "simulator.py").write_text(SIMULATOR.format(marker=str(marker)), encoding="utf-8")
    policy = {
        "providers": ["offline"],
        "endpoints": {
            "team-gpu": {
                "baseUrl": llm.url,
                "apiKeyEnv": "TEAM_GPU_KEY",
                "models": ["test"],
                "maxTokens": 128,
            }
        },
        "simulators": {
            "probe": {
                "command": [sys.executable, str(tmp / "simulator.py")],
                "environment": ["SIM_THREADS"],
            }
        },
    }
    policy_file = tmp / "policy.yaml"
    policy_file.write_text(yaml.safe_dump(policy), encoding="utf-8")
    strict = tmp / "strict.yaml"
    strict.write_text(yaml.safe_dump({"providers": ["offline"]}), encoding="utf-8")
    env = {
        **{
            k: v
            for k, v in os.environ.items()
            if k not in ("SIMREPORT_API_TOKENS", "SIMREPORT_LEDGER_URL")
        },
        "TEAM_GPU_KEY": ENDPOINT_KEY,
        "DB_PASSWORD": "db-password-never-shown-9a8b7c",
        "SIM_THREADS": "3",
        "PYTHONUNBUFFERED": "1",
    }
    return {
        "tmp": tmp,
        "library": root / "assets",
        "policy": policy_file,
        "strict": strict,
        "env": env,
        "marker": marker,
    }


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def service(
    request: pytest.FixtureRequest,
    setting: dict[str, Any],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Service]:
    """`simreport api --policy` with one worker of the same policy, on a fresh ledger."""
    if request.param == "postgresql" and not POSTGRES_URL:
        if os.environ.get("CI") == "true":
            pytest.fail("PostgreSQL is missing: .ci/run must start it", pytrace=False)
        pytest.skip("needs PostgreSQL (SIMREPORT_TEST_POSTGRES_URL)")
    tmp = tmp_path_factory.mktemp(request.param)
    with fresh_ledger(request.param, tmp / "ledger.sqlite") as ledger:
        running = Service(tmp, ledger, setting["policy"], setting["library"], setting["env"])
        try:
            yield running.start("--workers", "1")
        finally:
            running.stop()


# --------------------------------------------------------------------------- refused


def test_a_simulator_command_is_refused_at_submission_and_never_runs(
    service: Service, setting: dict[str, Any], tmp_path: Path
) -> None:
    pwned = tmp_path / "pwned"
    spec = {"simulator": {"command": ["sh", "-c", f"touch {pwned}"]}, "steps": 1}
    _, answer = service.submit(spec, version="1.0.0")
    assert code(answer) == "not_allowed"
    assert set(issues(answer)) == {"spec.simulator.command"}
    assert not pwned.exists()


def test_a_url_or_a_key_variable_of_a_model_is_refused_and_nothing_is_sent(
    service: Service, llm: FakeLLM
) -> None:
    calls = llm.calls
    spec = refund_spec(
        llm__provider="openai",
        llm__baseUrl=llm.url,
        llm__apiKeyEnv="DB_PASSWORD",
    )
    _, answer = service.submit(spec)
    assert code(answer) == "not_allowed"
    assert set(issues(answer)) == {"spec.llm.baseUrl", "spec.llm.apiKeyEnv"}
    # The same under the user's own model, with the service's tokens as the "key".
    spec = refund_spec(
        user__llm={"provider": "openai", "baseUrl": llm.url, "apiKeyEnv": "SIMREPORT_API_TOKENS"}
    )
    _, answer = service.submit(spec)
    assert set(issues(answer)) == {"spec.user.llm.baseUrl", "spec.user.llm.apiKeyEnv"}
    assert llm.calls == calls


@pytest.mark.parametrize(
    ("changes", "where"),
    [
        ({"llm__provider": "openai"}, "spec.llm.provider"),
        ({"llm": {"endpoint": "elsewhere", "model": "test"}}, "spec.llm.endpoint"),
        ({"llm": {"endpoint": "team-gpu", "model": "gpt-huge"}}, "spec.llm.model"),
        (
            {"llm": {"endpoint": "team-gpu", "model": "test", "maxTokens": 4096}},
            "spec.llm.maxTokens",
        ),
        ({"sut__entry": "os:system"}, "spec.sut.entry"),
        ({"sut__entry": "http://127.0.0.1:9/v1"}, "spec.sut.entry"),
        ({"provenance": {"assetLibrary": "../../../tmp"}}, "spec.provenance.assetLibrary"),
    ],
    ids=[
        "provider",
        "endpoint",
        "model",
        "max-tokens",
        "python-entry",
        "http-entry",
        "library",
    ],
)
def test_what_the_operator_did_not_declare_is_refused_with_its_path(
    service: Service, changes: dict[str, Any], where: str
) -> None:
    _, answer = service.submit(refund_spec(**changes))
    assert code(answer) == "not_allowed"
    assert where in issues(answer)


def test_a_version_the_operator_stored_with_a_command_is_refused_when_a_token_runs_it(
    service: Service, tmp_path: Path
) -> None:
    from simreport.service import queue

    scenario_id = service.scenario()
    pwned = tmp_path / "pwned"
    engine = connect(service.ledger)
    try:
        queue.submit_version(  # the operator's own path: no policy applies
            engine,
            tenant="local",
            scenario_id=scenario_id,
            version="1.0.0",
            spec={"simulator": {"command": ["sh", "-c", f"touch {pwned}"]}, "steps": 1},
            source=None,
            created_by="operator",
        )
    finally:
        engine.dispose()
    answer = service.run(scenario_id, version="1.0.0")
    assert code(answer) == "not_allowed"
    assert set(issues(answer)) == {"spec.simulator.command"}
    assert not pwned.exists()


# --------------------------------------------------------------------------- declared


def test_a_declared_endpoint_gets_the_operator_s_key_and_the_ledger_records_its_name(
    service: Service, llm: FakeLLM
) -> None:
    spec = refund_spec(llm={"endpoint": "team-gpu", "model": "test", "temperature": 0})
    scenario_id, answer = service.submit(spec)
    assert answer.status_code == 202, answer.text
    started = service.run(scenario_id)
    assert started.status_code == 202, started.text
    run_id, manifest_id = started.json()["run_id"], started.json()["manifest_id"]
    status = service.ended(run_id)
    assert status["execution_status"] == "completed", service.row(run_id).terminal_reason
    assert llm.calls > 0
    keys = {h.get("authorization") or h.get("Authorization") for h in llm.headers}
    assert keys == {f"Bearer {ENDPOINT_KEY}"}
    document = service.manifest_document(manifest_id)
    assert document["resources"] == {"llm.endpoint": "team-gpu"}
    assert llm.url not in json.dumps(document)


def test_a_declared_simulator_runs_by_name_with_only_the_environment_it_is_given(
    service: Service, setting: dict[str, Any]
) -> None:
    scenario_id, answer = service.submit(simulator_spec(name="probe"), version="1.0.0")
    assert answer.status_code == 202, answer.text
    started = service.run(scenario_id, version="1.0.0")
    assert started.status_code == 202, started.text
    run_id = started.json()["run_id"]
    assert service.ended(run_id)["execution_status"] == "completed"
    row = service.row(run_id)
    assert row.result["metrics"] == {"sawDbPassword": 0.0, "sawDeclared": 1.0}
    assert service.manifest_document(row.manifest_id)["resources"] == {"simulator.name": "probe"}


def test_a_worker_refuses_a_queued_run_its_own_policy_does_not_declare(
    setting: dict[str, Any], tmp_path: Path
) -> None:
    """The API's policy declares the simulator, the worker's does not: the worker decides what
    it executes, so the run ends crashed and the simulator never starts."""
    marker: Path = setting["marker"]
    marker.unlink(missing_ok=True)
    ledger = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    service = Service(tmp_path, ledger, setting["policy"], setting["library"], setting["env"])
    try:
        service.start("--workers", "0")
        scenario_id, answer = service.submit(simulator_spec(name="probe"), version="1.0.0")
        assert answer.status_code == 202, answer.text
        run_id = service.run(scenario_id, version="1.0.0").json()["run_id"]
        service.worker(setting["strict"])
        assert service.ended(run_id)["execution_status"] == "crashed"
        code, _, why = service.row(run_id).terminal_reason.partition(": ")
        assert code == "crashed" and why.startswith(f"{PolicyRefusal.__name__}: ")
        assert "spec.simulator.name" in why
        assert not marker.exists()
    finally:
        service.stop()


# --------------------------------------------------------------------------- never runnable


@pytest.mark.parametrize(
    ("changes", "expected_code", "where"),
    [
        ({"sut__agent": "no-such-agent@1.0.0"}, "manifest_unresolved", "spec.sut.agent"),
        (
            {"interaction__toolCallScript": ["get_order", "create_refund"]},
            "sut_boundary_replaced",
            "spec.interaction.toolCallScript",
        ),
        (
            {"participants": [{"id": "peer", "role": "planner", "kind": "real"}]},
            "unprocessable",
            "spec.participants.0.kind",
        ),
        (
            {"llm": {"provider": "openai", "baseUrl": "http://ana:***@127.0.0.1:9/v1"}},
            "not_allowed",
            "spec.llm.baseUrl",
        ),
    ],
    ids=["unresolvable-asset", "boundary-replaced", "real-participant", "redacted-credentials"],
)
def test_a_version_that_could_never_run_is_refused_at_submission(
    service: Service, changes: dict[str, Any], expected_code: str, where: str
) -> None:
    scenario_id, answer = service.submit(refund_spec(**changes))
    assert code(answer) == expected_code
    assert where in issues(answer)
    # Nothing was stored: no run of it can start.
    assert service.run(scenario_id).status_code == 404
