"""The engine and the run-directory contract (SPEC §4): files, determinism, failure as data."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar

import pytest

from simreport.core.schema import Model, RunResult
from simreport.kernel import engine, kernel_fingerprint, run_scenario, validate_scenario
from simreport.kernel.providers import PROVIDERS, ChatRequest, ChatResponse, Provider, ProviderError
from simreport.kernel.world import World, WorldOutcome
from simreport.kernel.worlds import WORLDS

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _pd(**extra: Any) -> Any:
    doc: dict[str, Any] = {
        "world": "prisoners_dilemma",
        "steps": 4,
        "seed": 11,
        "seedPath": [11, 0],
        "population": {"n": 4, "fields": {"disposition": ["cooperative", "competitive"]}},
        "params": {"framing": "neutral", "memoryWindow": 2},
    }
    doc.update(extra)
    return validate_scenario(doc)


def test_run_directory_contract(tmp_path: Path) -> None:
    result = run_scenario(_pd(), tmp_path / "run", condition="base", replication=0)
    files = sorted(p.name for p in (tmp_path / "run").iterdir())
    assert files == ["events.jsonl", "manifest.json", "result.json", "scenario.json"]
    doc = json.loads((tmp_path / "run" / "result.json").read_text())
    assert set(doc) == {
        "schemaVersion",
        "condition",
        "replication",
        "seedPath",
        "status",
        "metrics",
        "distributions",
        "integrity",
        "cost",
        "failure",
        "purpose",  # beyond SPEC §4's keys: why the run was made (SPEC §10)
    }
    assert doc["purpose"] == "exploration"
    assert doc["status"] == {
        "execution": "completed",
        "validity": "unchecked",
        "evidence": "complete",
        "quality": None,
    }
    assert doc["seedPath"] == [11, 0]
    assert set(doc["metrics"]) == {"cooperationRate", "mutualCooperationRate", "averagePayoff"}
    assert sum(doc["distributions"]["choice"].values()) == 16
    assert doc["integrity"]["complete"] is True
    assert doc["integrity"]["counters"]["decisions"] == 16
    assert doc["cost"]["llmCalls"] == 16 and doc["cost"]["promptTokens"] > 0
    assert RunResult.model_validate(doc) == result

    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["seedPath"] == [11, 0]
    assert manifest["provider"] == "offline"
    assert len(manifest["scenarioSha256"]) == 64
    assert manifest["kernelFingerprint"] == kernel_fingerprint("prisoners_dilemma")

    events = [
        json.loads(line) for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()
    ]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert events[0]["type"] == "run_started" and events[-1]["type"] == "run_finished"
    assert {"seq", "type", "actor", "t", "wall", "payload"} <= set(events[1])
    assert not list((tmp_path / "run").glob(".*tmp"))


def test_same_scenario_same_bytes_and_seed_path_matters(tmp_path: Path) -> None:
    run_scenario(_pd(), tmp_path / "a")
    run_scenario(_pd(), tmp_path / "b")
    for name in ("result.json", "scenario.json", "manifest.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    results = {
        json.dumps(run_scenario(_pd(seedPath=[11, r]), tmp_path / f"r{r}").metrics)
        for r in range(6)
    }
    assert len(results) > 1, "replications must differ by their seed lineage"


def test_temperature_and_models_change_nothing_else(tmp_path: Path) -> None:
    small = run_scenario(_pd(llm={"model": "offline-small", "temperature": 0}), tmp_path / "s")
    large = run_scenario(_pd(llm={"model": "offline-large", "temperature": 0}), tmp_path / "l")
    assert small.failure is None and large.failure is None


class _Broken(Provider):
    name = "broken"

    def complete(self, request: ChatRequest) -> ChatResponse:
        raise ProviderError("server went away", kind="ConnectError")


class _Babbling(Provider):
    name = "babbling"

    def complete(self, request: ChatRequest) -> ChatResponse:
        return ChatResponse(text="I would rather not say.", prompt_tokens=10, completion_tokens=5)


@pytest.fixture(autouse=True, scope="module")
def _test_providers() -> None:
    for name, cls in (("test-broken", _Broken), ("test-babbling", _Babbling)):
        if name not in PROVIDERS:
            PROVIDERS.register(name)(lambda config, cls=cls: cls(config))


def test_lost_decisions_are_counted_and_make_the_run_incomplete(tmp_path: Path) -> None:
    result = run_scenario(_pd(llm={"provider": "test-babbling"}), tmp_path / "run")
    assert result.failure is None
    assert result.integrity.complete is False
    assert result.status.evidence == "partial"
    counters = result.integrity.counters
    assert counters["parseFailures"] == 16
    assert counters["substitutedDecisions"] == 16
    assert result.cost.llm_calls == 16 and result.cost.completion_tokens == 80


def test_provider_failures_are_data(tmp_path: Path) -> None:
    result = run_scenario(_pd(llm={"provider": "test-broken"}), tmp_path / "run")
    assert result.failure is None
    assert result.integrity.counters["llmFailures"] == 16
    assert not result.integrity.complete
    events = (tmp_path / "run" / "events.jsonl").read_text()
    assert "llm_failure" in events and "server went away" in events


class _ExplodingParams(Model):
    pass


class _Exploding(World):
    name = "test_exploding"
    Params = _ExplodingParams
    metrics: ClassVar[tuple[str, ...]] = ("x",)

    def run(self) -> WorldOutcome:
        self.ctx.begin_step(0)
        raise ZeroDivisionError("the world ended")


def test_a_crashing_world_becomes_a_failed_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Registered for this test only: other tests list the built-in worlds.
    monkeypatch.setitem(WORLDS._items, "test_exploding", _Exploding)
    scenario = validate_scenario({"world": "test_exploding"})
    result = run_scenario(scenario, tmp_path / "run")
    assert result.status.execution == "crashed"
    assert result.failure is not None
    assert result.failure.stage == "running"
    assert result.failure.type == "ZeroDivisionError"
    assert "the world ended" in result.failure.message
    assert (
        json.loads((tmp_path / "run" / "result.json").read_text())["failure"]["type"]
        == "ZeroDivisionError"
    )


def test_unknown_provider_at_run_time_is_a_failed_result(tmp_path: Path) -> None:
    result = run_scenario(_pd(), tmp_path / "run", provider="no-such-provider")
    assert result.failure is not None
    assert "no-such-provider" in result.failure.message


def test_stale_result_is_removed_before_a_rerun(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "result.json").write_text("{}")
    run_scenario(_pd(), run_dir)
    assert json.loads((run_dir / "result.json").read_text())["schemaVersion"] == 1


def test_rule_executors_beside_llm(tmp_path: Path) -> None:
    scenario = _pd(
        executors=[
            {"kind": "rule", "rule": "tit_for_tat", "agents": [0, 2]},
            {"kind": "llm", "agents": "rest"},
        ]
    )
    result = run_scenario(scenario, tmp_path / "run")
    assert result.failure is None
    assert result.integrity.counters["ruleDecisions"] == 8
    assert result.cost.llm_calls == 8


def test_bad_executor_assignment_is_rejected_at_validation() -> None:
    from simreport.core.errors import SchemaError

    # Each names the agent: 1 is claimed twice; 2 (and 3) have no executor.
    with pytest.raises(SchemaError) as info:
        _pd(executors=[{"kind": "llm", "agents": [0, 1]}, {"kind": "llm", "agents": [1, 2, 3]}])
    assert (info.value.path, info.value.issues[0].kind) == ("executors", "executor_assignment")
    assert re.findall(r"\d+", info.value.message) == ["1"]
    with pytest.raises(SchemaError) as info:
        _pd(executors=[{"kind": "llm", "agents": [0, 1]}])
    assert (info.value.path, info.value.issues[0].kind) == ("executors", "executor_assignment")
    assert re.findall(r"\d+", info.value.message) == ["2"]
    with pytest.raises(SchemaError) as info:
        _pd(executors=[{"kind": "rule", "rule": "telepathy"}])
    assert info.value.path == "executors.0.rule"


def test_policies_activate_as_documented(tmp_path: Path) -> None:
    base = validate_scenario(
        {
            "world": "echo_chamber",
            "steps": 5,
            "population": {"n": 20},
            "params": {"degree": 4},
            "policy": {"name": "round_robin", "options": {"perStep": 3}},
        }
    )
    result = run_scenario(base, tmp_path / "rr")
    assert result.integrity.counters["activated"] == 15
    bern = validate_scenario(
        {
            "world": "echo_chamber",
            "steps": 5,
            "population": {"n": 20},
            "params": {"degree": 4},
            "policy": {"name": "bernoulli", "options": {"p": 0.0}},
        }
    )
    assert run_scenario(bern, tmp_path / "b0").integrity.counters.get("activated", 0) == 0


def _example(name: str) -> dict[str, Any]:
    import yaml

    data: dict[str, Any] = yaml.safe_load((EXAMPLES / name / "scenario.yaml").read_text())
    return data


@pytest.mark.parametrize(
    ("target", "value"),
    [
        ("personaFormat", "table"),
        ("instructionOrder", "instructions_first"),
        ("memoryRepresentation", "json"),
        ("rolePlacement", "user"),
    ],
)
def test_each_representation_axis_moves_an_offline_metric(
    tmp_path: Path, target: str, value: str
) -> None:
    """With the offline provider, every representation setting changes at least one metric."""
    base_doc = _example("prisoners_dilemma")
    changed = json.loads(json.dumps(base_doc))
    changed["prompt"][target] = value
    moved = False
    for r in range(3):
        a = run_scenario(validate_scenario({**base_doc, "seedPath": [r]}), tmp_path / f"a{r}")
        b = run_scenario(validate_scenario({**changed, "seedPath": [r]}), tmp_path / f"b{r}")
        moved |= a.metrics != b.metrics
    assert moved


def test_framing_moves_offline_cooperation(tmp_path: Path) -> None:
    base_doc = _example("prisoners_dilemma")
    rates = {}
    for framing in ("neutral", "moralised", "risk"):
        doc = json.loads(json.dumps(base_doc))
        doc["params"]["framing"] = framing
        rates[framing] = run_scenario(validate_scenario(doc), tmp_path / framing).metrics[
            "cooperationRate"
        ]
    assert rates["moralised"] > rates["neutral"] > rates["risk"]


def test_fingerprint_covers_a_worlds_code_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    """The testbed package's code reaches refund_desk's fingerprint, and only refund_desk's."""
    refund = WORLDS.get("refund_desk")
    with_testbed = kernel_fingerprint("refund_desk")
    pd = kernel_fingerprint("prisoners_dilemma")
    monkeypatch.setattr(refund, "code_packages", ())
    assert kernel_fingerprint("refund_desk") != with_testbed
    assert kernel_fingerprint("prisoners_dilemma") == pd


def test_a_worlds_fingerprint_takes_its_packages_whole_folders(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every module of the world's package and of its code packages, subpackages included: a
    module split into a package keeps its code in the fingerprint; so does the data a world's
    code reads as rules (the refund desk's domain.yaml)."""
    read: set[Path] = set()

    def collect(files: Iterable[Path]) -> str:
        read.update(Path(f).resolve() for f in files)
        return "collected"

    monkeypatch.setattr(engine, "_FINGERPRINTS", {})
    monkeypatch.setattr(engine, "code_fingerprint", collect)
    kernel_fingerprint("refund_desk")
    kernel = Path(engine.__file__).resolve().parent
    modules = {
        path
        for folder in ("testbed", "worlds/refund_desk")
        for path in (kernel / folder).rglob("*.py")
    }
    assert kernel / "testbed" / "environment" / "gateway.py" in modules
    assert kernel / "testbed" / "lifecycle" / "loading.py" in modules
    assert kernel / "worlds" / "refund_desk" / "joint_model.py" in modules
    assert modules <= read, sorted(map(str, modules - read))
    assert kernel / "worlds" / "refund_desk" / "domain.yaml" in read


def test_a_fingerprint_is_computed_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run takes its world's fingerprint from memory: the files are found and read once."""
    monkeypatch.setattr(engine, "_FINGERPRINTS", {})
    first = kernel_fingerprint("refund_desk")

    def unread(files: object) -> str:
        raise AssertionError("the kernel's files were read again")

    monkeypatch.setattr(engine, "code_fingerprint", unread)
    assert kernel_fingerprint("refund_desk") == first
    # Other modules are another fingerprint, computed (here: refused) afresh.
    monkeypatch.setattr(WORLDS.get("refund_desk"), "code_packages", ())
    with pytest.raises(AssertionError, match="read again"):
        kernel_fingerprint("refund_desk")


class _Spent(Provider):
    name = "spent"

    def complete(self, request: ChatRequest) -> ChatResponse:
        raise ProviderError("the run's call budget (0) is spent", kind="BudgetExhausted")


def test_a_spent_budget_stops_the_run_as_a_failure(tmp_path: Path) -> None:
    if "test-spent" not in PROVIDERS:
        PROVIDERS.register("test-spent")(lambda config: _Spent(config))
    result = run_scenario(_pd(llm={"provider": "test-spent"}), tmp_path / "run")
    assert result.status.execution == "crashed"
    assert result.failure is not None
    assert (result.failure.type, result.failure.stage) == ("BudgetExhausted", "running")
    assert "budget" in result.failure.message
    assert result.integrity.counters["llmFailures"] == 4  # one step's decisions, then it stops
    assert (tmp_path / "run" / "events.jsonl").exists()
