"""The execution policy's file, its names in scenarios and how a run resolves them, on the
command line (the run service's side is in tests/service/security/test_execution_policy.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from simreport.core.errors import RunError, SchemaError
from simreport.core.execution_policy import (
    ExecutionPolicy,
    load_policy,
    resolve_llm,
    resolve_simulator,
    spec_issues,
)
from simreport.core.schema import LLMConfig, Scenario, SimulatorConfig
from tests.support.service_helpers import simreport_command

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

POLICY = {
    "endpoints": {
        "gpu": {
            "baseUrl": "http://127.0.0.1:9/v1",
            "apiKeyEnv": "GPU_KEY",
            "models": ["m1", "m2"],
            "maxTokens": 100,
            "budgetCalls": 50,
            "timeoutSeconds": 5,
        }
    },
    "simulators": {"ok": {"command": [sys.executable, str(FIXTURES / "sim_ok.py")]}},
}


def test_names_leave_every_other_document_as_it_was() -> None:
    """Scenarios that name no endpoint or simulator keep their documents, so their hashes and
    run keys do not move."""
    assert "endpoint" not in LLMConfig().to_doc()
    assert "name" not in SimulatorConfig(command=["x"]).to_doc()
    named = LLMConfig.model_validate({"endpoint": "gpu", "model": "m1"})
    assert named.to_doc()["provider"] == "openai" and named.to_doc()["endpoint"] == "gpu"


@pytest.mark.parametrize(
    "doc",
    [
        {"endpoint": "gpu", "baseUrl": "http://h/v1"},
        {"endpoint": "gpu", "apiKeyEnv": "K"},
        {"endpoint": "gpu", "provider": "offline"},
        {"endpoint": "../gpu"},
    ],
)
def test_an_endpoint_comes_alone(doc: dict[str, str]) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        LLMConfig.model_validate(doc)


def test_a_simulator_has_a_command_or_a_name() -> None:
    from pydantic import ValidationError

    for doc in ({}, {"command": ["x"], "name": "ok"}):
        with pytest.raises(ValidationError):
            SimulatorConfig.model_validate(doc)


def test_an_endpoint_caps_what_the_spec_asks() -> None:
    policy = ExecutionPolicy.model_validate(POLICY)
    asked = LLMConfig.model_validate(
        {"endpoint": "gpu", "model": "m2", "budgetCalls": 500, "timeoutSeconds": 2}
    )
    resolved = resolve_llm(asked, policy)
    assert (resolved.provider, resolved.base_url, resolved.api_key_env) == (
        "openai",
        "http://127.0.0.1:9/v1",
        "GPU_KEY",
    )
    assert (resolved.budget_calls, resolved.timeout_seconds, resolved.budget_tokens) == (
        50,
        2,
        None,
    )
    for wrong, where in (({"model": "m3"}, "model"), ({"maxTokens": 101}, "maxTokens")):
        doc = {"endpoint": "gpu", "model": "m1", **wrong}
        with pytest.raises(RunError) as refused:
            resolve_llm(LLMConfig.model_validate(doc), policy)
        assert refused.value.kind == "endpoint_undeclared" and where in refused.value.message
    with pytest.raises(RunError):
        resolve_llm(LLMConfig.model_validate({"endpoint": "gpu", "model": "m1"}), None)


def test_a_declared_simulator_gets_a_minimal_environment() -> None:
    policy = ExecutionPolicy.model_validate(
        {"simulators": {"ok": {"command": ["sim"], "environment": ["OMP_NUM_THREADS"]}}}
    )
    scenario = Scenario.model_validate({"simulator": {"name": "ok"}})
    command, timeout, environment = resolve_simulator(scenario, policy)
    assert command == ["sim"] and timeout == 300.0
    assert environment is not None and "OMP_NUM_THREADS" in environment
    assert "DB_PASSWORD" not in environment
    own = Scenario.model_validate({"simulator": {"command": ["mine"]}})
    assert resolve_simulator(own, policy) == (["mine"], 300.0, None)


def test_spec_issues_locate_each_field() -> None:
    scenario = Scenario.model_validate(
        {
            "simulator": {"command": ["sh"]},
            "llm": {"provider": "openai", "baseUrl": "http://h/v1", "apiKeyEnv": "K"},
        }
    )
    paths = {i.path for i in spec_issues(scenario, ExecutionPolicy())}
    assert paths == {"simulator.command", "llm.baseUrl", "llm.apiKeyEnv"}


def test_a_policy_file_is_checked_where_it_is_wrong(tmp_path: Path) -> None:
    bad = tmp_path / "policy.yaml"
    bad.write_text("endpoints:\n  gpu:\n    baseUrl: file:///etc\n    models: [m]\n")
    with pytest.raises(SchemaError) as refused:
        load_policy(bad)
    assert refused.value.path == "endpoints.gpu.baseUrl" and refused.value.line == 3
    bad.write_text("providers: [openai]\n")
    ledger = f"sqlite:///{tmp_path}/l.sqlite"
    answer = subprocess.run(
        [*simreport_command(), "api", "--ledger", ledger, "--policy", str(bad), "--port", "9"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert answer.returncode == 2
    assert "providers.0" in answer.stderr and len(answer.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_simreport_run_resolves_a_simulator_s_name_with_a_policy(tmp_path: Path) -> None:
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(
        yaml.safe_dump({"simulator": {"name": "ok", "metrics": ["hitRate"]}, "params": {}})
    )
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(POLICY))
    base = [*simreport_command(), "run", str(scenario), "--no-ledger"]
    ran = subprocess.run(
        [*base, "--out", str(tmp_path / "a"), "--policy", str(policy)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert manifest["simulator"] == "ok"
    unresolved = subprocess.run(
        [*base, "--out", str(tmp_path / "b")], capture_output=True, text=True, timeout=120
    )
    assert unresolved.returncode == 3
    result = json.loads((tmp_path / "b" / "result.json").read_text())
    assert result["failure"]["type"] == "simulator_undeclared"
    assert result["failure"]["stage"] == "loading"
