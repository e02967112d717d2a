"""A spec that replaces the system under test inside its declared boundary is refused by the run
service with 422 `sut_boundary_replaced` when it is submitted and when a run of it is started,
with or without an execution policy, each replacement located at the field that declares it —
by the function loading a run refuses it with (`located_replacements`), so the two can never
disagree. On SQLite and PostgreSQL."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from simreport.core.execution_policy import ExecutionPolicy
from simreport.core.files import load_document
from simreport.kernel.engine import run_scenario, validate_scenario
from simreport.kernel.testbed.assets import AgentAsset, AssetLibrary
from simreport.kernel.testbed.boundary import REFUSAL, located_replacements
from simreport.ledger import tables as t
from simreport.service import queue as q

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "refund_desk"
TENANT = "local"
VERSION = "1.3.0"
RULE = [{"kind": "rule", "rule": "random", "agents": [0]}, {"agents": "rest"}]


@pytest.fixture
def library(tmp_path: Path) -> Path:
    """The refund desk's library with a scripted agent added (a fixed tool-call order)."""
    root = tmp_path / "refund_desk"
    shutil.copytree(EXAMPLE, root)
    folder = root / "assets" / "scripted-agent"
    folder.mkdir()
    doc = {
        "kind": "agent",
        "name": "scripted-agent",
        "version": "1.0.0",
        "content": {"adapter": "scripted", "script": ["create_refund"]},
    }
    (folder / "1.0.0.json").write_text(json.dumps(doc), encoding="utf-8")
    return root / "assets"


def spec(change: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    data = load_document(EXAMPLE / "scenario.yaml").data
    assert isinstance(data, dict)
    if change is not None:
        change(data)
    return data


def script(doc: dict[str, Any]) -> None:
    doc["interaction"]["toolCallScript"] = ["create_refund", "create_refund"]


def surrogate(doc: dict[str, Any]) -> None:
    doc["participants"] = [
        {"id": "helper", "role": "peer", "kind": "surrogate", "replaces": []},
        {"id": "planner", "role": "planner", "kind": "surrogate", "replaces": ["reasoning"]},
    ]


def rule(doc: dict[str, Any]) -> None:
    doc["executors"] = RULE


def scripted_agent(doc: dict[str, Any]) -> None:
    doc["sut"]["agent"] = "scripted-agent@1.0.0"


def script_and_rule(doc: dict[str, Any]) -> None:
    script(doc)
    rule(doc)


CASES = {
    "tool-call-script": (script, ["spec.interaction.toolCallScript"]),
    "surrogate-participant": (surrogate, ["spec.participants.1.replaces"]),
    "rule-executor": (rule, ["spec.executors.0"]),
    "scripted-agent": (scripted_agent, ["spec.sut.agent"]),
    "two-at-once": (script_and_rule, ["spec.interaction.toolCallScript", "spec.executors.0"]),
}


def scenario_id(engine: Engine, name: str) -> str:
    return q.create_scenario(
        engine, tenant=TENANT, namespace="support", name=name, owner="qa", risk_level="low"
    )


def submit(engine: Engine, sid: str, doc: dict[str, Any], **more: Any) -> str:
    return q.submit_version(
        engine,
        tenant=TENANT,
        scenario_id=sid,
        version=VERSION,
        spec=doc,
        source=None,
        created_by="ana",
        **more,
    )


def start(engine: Engine, sid: str, library: Path, **more: Any) -> tuple[str, str]:
    return q.start_run(
        engine,
        tenant=TENANT,
        principal="ci",
        scenario_id=sid,
        version=VERSION,
        mode="surrogate",
        seed=None,
        budget=None,
        purpose="exploration",
        library=library,
        **more,
    )


def refused_paths(error: q.Unprocessable) -> list[str]:
    assert (error.status, error.code) == (422, REFUSAL)
    assert all(i["message"] and i["expected"] for i in error.issues)
    return [i["path"] for i in error.issues]


def count_runs(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(t.run)).scalar_one())


@pytest.mark.parametrize("policy", [None, ExecutionPolicy()], ids=["operator", "client"])
@pytest.mark.parametrize("case", list(CASES))
def test_a_spec_replacing_the_sut_is_refused_at_submission_located(
    engine: Engine, library: Path, case: str, policy: ExecutionPolicy | None
) -> None:
    change, paths = CASES[case]
    sid = scenario_id(engine, case)
    with pytest.raises(q.Unprocessable) as refused:
        submit(engine, sid, spec(change), policy=policy, library=library)
    assert refused_paths(refused.value) == paths
    with pytest.raises(q.NotFound):  # nothing was stored
        start(engine, sid, library, policy=policy)


@pytest.mark.parametrize("policy", [None, ExecutionPolicy()], ids=["operator", "client"])
def test_a_run_replacing_the_sut_is_refused_at_start_and_never_queued(
    engine: Engine, library: Path, tmp_path: Path, policy: ExecutionPolicy | None
) -> None:
    """The version was stored before its agent became a scripted one (the label moved): the
    start refuses it, as loading would, and queues nothing."""
    sid = scenario_id(engine, "moved-label")
    doc = spec(lambda d: d["sut"].update(agent="refund-agent@stable"))
    assert submit(engine, sid, doc, policy=policy, library=library) == "reviewing"
    labels = library / "refund-agent" / "labels.yaml"
    shutil.copy(library / "scripted-agent" / "1.0.0.json", library / "refund-agent" / "9.0.0.json")
    moved = json.loads((library / "refund-agent" / "9.0.0.json").read_text(encoding="utf-8"))
    moved.update(name="refund-agent", version="9.0.0")
    (library / "refund-agent" / "9.0.0.json").write_text(json.dumps(moved), encoding="utf-8")
    labels.write_text("stable: 9.0.0\n", encoding="utf-8")
    before = count_runs(engine)
    with pytest.raises(q.Unprocessable) as refused:
        start(engine, sid, library, policy=policy)
    assert refused_paths(refused.value) == ["spec.sut.agent"]
    assert count_runs(engine) == before


def test_without_a_library_submission_refuses_what_needs_no_agent(engine: Engine) -> None:
    """An operator's submission without a library: what replaces the SUT whatever its agent
    is refused all the same; what depends on the agent's asset waits for the start."""
    sid = scenario_id(engine, "no-library")
    with pytest.raises(q.Unprocessable) as refused:
        submit(engine, sid, spec(surrogate))
    assert refused_paths(refused.value) == ["spec.participants.1.replaces"]
    assert submit(engine, sid, spec(rule)) == "reviewing"  # a rule replaces a reference agent


def test_a_tool_script_outside_the_boundary_is_accepted(engine: Engine, library: Path) -> None:
    def outside(doc: dict[str, Any]) -> None:
        script(doc)
        doc["sut"]["boundary"] = ["reasoning", "parameters", "recovery"]

    sid = scenario_id(engine, "outside")
    assert submit(engine, sid, spec(outside), policy=ExecutionPolicy(), library=library)
    run_id, _ = start(engine, sid, library, policy=ExecutionPolicy())
    assert q.get_run(engine, run_id, tenant=TENANT)["execution_status"] == "pending"


@pytest.mark.parametrize("case", list(CASES))
def test_loading_refuses_what_the_service_refuses(library: Path, tmp_path: Path, case: str) -> None:
    """The kernel refuses each case at load with the same function: the replacements the
    service locates are the ones the run's failure names."""
    change, paths = CASES[case]
    scenario = validate_scenario(spec(change))
    assert scenario.sut is not None
    agent = AssetLibrary(library).resolve(scenario.sut.agent, "agent", "sut.agent")
    found = located_replacements(scenario, agent.typed(AgentAsset))
    assert ["spec." + r.path for r in found] == paths
    result = run_scenario(scenario, tmp_path / "run", asset_root=library.parent)
    assert result.failure is not None
    assert (result.failure.stage, result.failure.type) == ("loading", REFUSAL)
    assert all(r.message in result.failure.message for r in found)
    assert result.cost.llm_calls == 0
