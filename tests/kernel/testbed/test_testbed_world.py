"""The refund desk end to end through `run_scenario`: the three acceptance cases of the testbed
design, the three fault positions, a user who never gives the order number, boundary refusals,
the lifecycle's failure semantics and the result layers in the run directory."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from simreport.core.overrides import set_path
from simreport.core.schema import RunResult, Scenario
from simreport.core.versions import design_sha256
from simreport.evaluation import evaluate_run
from simreport.kernel import load_scenario, run_scenario, validate_scenario
from simreport.kernel.testbed.assets import AssetLibrary, ResolvedAsset, manifest_references
from simreport.kernel.testbed.lifecycle import collecting
from simreport.kernel.testbed.records import read_records
from simreport.kernel.testbed.replay_records import compare_records
from simreport.kernel.worlds import refund_desk
from simreport.kernel.worlds.refund_desk import desk_run

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "refund_desk"


def scenario_doc(*, example: Path = EXAMPLE, **overrides: Any) -> dict[str, Any]:
    """The example's scenario (the refund desk's unless `example` names another folder), with
    `overrides` (`a__b=value` sets `a.b`)."""
    doc = load_scenario(example / "scenario.yaml").scenario.to_doc()
    for path, value in overrides.items():
        doc = set_path(doc, path.replace("__", "."), value)
    return doc


def resolve_assets(scenario: Scenario, root: Path = EXAMPLE) -> dict[str, ResolvedAsset]:
    """Every asset of the scenario's manifest, resolved in the library of the example at `root`
    (as LOADING resolves them, without a run)."""
    library = AssetLibrary(root / "assets")
    return {
        slot: library.resolve(ref, kind, slot) for slot, ref, kind in manifest_references(scenario)
    }


def without(asset: ResolvedAsset, field: str, key: str) -> ResolvedAsset:
    """The resolved asset with `key` left out of the mapping its content holds in `field` (a
    model copy; the file is untouched)."""
    kept = {k: v for k, v in getattr(asset.content, field).items() if k != key}
    return dataclasses.replace(asset, content=asset.content.model_copy(update={field: kept}))


def run(
    tmp: Path, doc: dict[str, Any] | None = None, *, root: Path = EXAMPLE, name: str = "run"
) -> tuple[RunResult, Path]:
    out = tmp / name
    result = run_scenario(validate_scenario(doc or scenario_doc()), out, asset_root=root)
    return result, out


def evaluated(out: Path) -> dict[str, Any]:
    """The run's evaluation: the run writes none; `simreport evaluate`'s step writes it after."""
    assert not (out / "evaluation.json").exists()
    doc = evaluate_run(out)
    assert read(out, "evaluation.json") == doc
    return doc


def records(out: Path) -> list[dict[str, Any]]:
    return read_records(out / "records.jsonl")


def types(out: Path) -> list[str]:
    return [r["type"] for r in records(out)]


def lifecycle(out: Path) -> list[str]:
    return [r["payload"]["to"] for r in records(out) if r["type"] == "lifecycle"]


def fault_stages(out: Path, fault: str = "refund-timeout") -> list[str]:
    return [
        r["type"].split(".", 1)[1]
        for r in records(out)
        if r["type"].startswith("fault.") and r["payload"]["faultId"] == fault
    ]


def read(out: Path, name: str) -> Any:
    return json.loads((out / name).read_text(encoding="utf-8"))


# --------------------------------------------------------------------------- acceptance


def test_two_runs_of_one_manifest_align_record_by_record(tmp_path: Path) -> None:
    first, a = run(tmp_path, name="a")
    second, b = run(tmp_path, name="b")
    assert first.status.execution == second.status.execution == "completed"
    assert read(a, "manifest.json")["manifestSha256"] == read(b, "manifest.json")["manifestSha256"]
    report = compare_records(records(a), records(b))
    assert report.ok, report.summary()
    assert report.matched == len(records(a)) > 20
    # Real-clock readings differ between the runs and are kept out of the content.
    assert all("wall" in r["clock"] for r in records(a))


def test_a_missing_agent_version_fails_in_loading_without_calling_the_agent(
    tmp_path: Path,
) -> None:
    result, out = run(tmp_path, scenario_doc(sut__agent="refund-agent@9.9.9"))
    assert result.failure is not None
    assert result.failure.stage == "loading"
    assert result.failure.type == "manifest_unresolved"
    assert "9.9.9" in result.failure.message
    assert result.status.execution == "crashed"
    assert result.cost.llm_calls == 0
    assert result.integrity.counters.get("agentCalls") == 0
    assert result.integrity.counters.get("decisions", 0) == 0
    assert lifecycle(out) == ["LOADING", "FAILED"]
    assert not any(t.startswith(("agent.", "tool.", "user.")) for t in types(out))


def test_a_world_without_a_reference_agent_refuses_one_in_loading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The built-in agent is a world's own (`_make_reference_agent`); the generic run has none.
    monkeypatch.delattr(desk_run.RefundDeskRun, "_make_reference_agent")
    result, out = run(tmp_path)
    assert result.failure is not None
    assert (result.failure.stage, result.failure.type) == ("loading", "manifest_unresolved")
    assert "built-in agent" in result.failure.message
    assert result.integrity.counters.get("agentCalls") == 0
    assert lifecycle(out) == ["LOADING", "FAILED"]


def test_a_fault_that_never_hits_leaves_the_run_violated(tmp_path: Path) -> None:
    # The window opens at the fifth call of create_refund: the agent never gets that far.
    result, out = run(tmp_path, scenario_doc(events__triggers__0__at={"call": 5}))
    assert result.status.execution == "completed"
    assert result.status.validity == "violated"
    assert fault_stages(out) == ["planned", "armed", "failed"]
    failed = next(r for r in records(out) if r["type"] == "fault.failed")
    assert failed["payload"]["reason"] == "never_hit"
    evaluation = evaluated(out)
    assert {c["verdict"] for c in evaluation["criteria"].values()} == {"undecidable"}
    assert evaluation["checks"]["runValid"]["passed"] is False
    from simreport.analysis.audit import usable

    assert not usable(result, include_incomplete=False)


# --------------------------------------------------------------------------- the run directory


def test_run_directory_has_every_result_layer(tmp_path: Path) -> None:
    result, out = run(tmp_path)
    for name in (
        "records.jsonl",
        "observations.json",
        "evidence.json",
        "completeness.json",
        "manifest.json",
        "result.json",
        "events.jsonl",
    ):
        assert (out / name).is_file(), name
    assert not (out / "workspace").exists()  # cleaned
    assert not (out / "evaluation.json").exists()  # the run judges nothing
    assert result.status.to_doc() == {
        "execution": "completed",
        "validity": "valid",
        "evidence": "complete",
        "quality": None,
    }
    assert set(result.metrics) == set(refund_desk.METRICS)
    assert lifecycle(out) == [
        "LOADING",
        "INITIALIZING",
        "RUNNING",
        "DRAINING",
        "COLLECTING",
        "CLEANED",
    ]
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    moves = [e["payload"]["data"]["to"] for e in events if e["type"] == "lifecycle"]
    assert moves[-1] == "CLEANED"
    # Each record carries the trace; every event the four clocks apart.
    recs = records(out)
    assert len({r["traceId"] for r in recs}) == 1 and len(recs[0]["traceId"]) == 32
    event = next(e for e in events if e["type"] == "tool.response")
    assert {"logicalMs", "businessTime", "durationNs"} <= set(event["payload"])
    assert "wall" in event


def test_manifest_records_exact_versions_and_never_a_label(tmp_path: Path) -> None:
    _, out = run(tmp_path)
    manifest = read(out, "manifest.json")
    assert manifest["resolved"]["sut.agent"]["version"] == "2.4.1"
    assert manifest["resolved"]["sut.prompt"]["version"] == "1.0.0"
    assert manifest["assets"]["refund-agent@2.4.1"] == manifest["resolved"]["sut.agent"]["sha256"]
    scenario = json.loads((out / "scenario.json").read_text())
    assert manifest["scenarioVersion"] == {
        "id": "refund-timeout-retry",
        "version": "1.3.0",
        "sha256": manifest["scenarioSha256"],
        "designSha256": design_sha256(scenario),
    }
    assert manifest["purpose"] == "exploration"
    assert "stable" not in json.dumps(manifest)


def test_observations_name_what_they_were_derived_from(tmp_path: Path) -> None:
    _, out = run(tmp_path)
    obs = {o["factKey"]: o for o in read(out, "observations.json")["observations"]}
    ids = {r["recordId"] for r in records(out)}
    for fact in ("refund.count", "refund.amounts_minor", "order.state", "conversation.turns"):
        assert obs[fact]["derivedFrom"] and set(obs[fact]["derivedFrom"]) <= ids
    evidence = read(out, "evidence.json")["criteria"]
    assert evidence["no_duplicate_refund"]["sufficient"] is True
    assert set(evidence["no_duplicate_refund"]["evidenceRefs"]) <= ids
    checks = read(out, "completeness.json")["checks"]
    assert checks["fault_recovery"]["status"] == "present"
    assert checks["state_snapshot"]["status"] == "present"


def test_create_then_get_agree_in_every_run(tmp_path: Path) -> None:
    for seed in range(4):
        _, out = run(tmp_path, scenario_doc(seedPath=[seed]), name=f"r{seed}")
        created = {}
        for r in records(out):
            body = r["payload"].get("body") or {}
            ok_create = r["type"] == "tool.response" and r["payload"]["tool"] == "create_refund"
            if ok_create and body.get("ok"):
                created[body["refund"]["refundId"]] = body["refund"]["amountMinor"]
            if r["type"] == "tool.response.lost":
                created[body["refund"]["refundId"]] = body["refund"]["amountMinor"]
        snapshot = next(r for r in records(out) if r["type"] == "environment.snapshot")
        stored = {x["id"]: x["amountMinor"] for x in snapshot["payload"]["refund"]}
        assert stored == created
        for r in records(out):
            if r["type"] == "tool.response" and r["payload"]["tool"] == "get_refund":
                for found in r["payload"]["body"]["refunds"]:
                    assert stored[found["refundId"]] == found["amountMinor"]


# --------------------------------------------------------------------------- fault positions


@pytest.mark.parametrize("position", ["not_sent", "sent_not_committed", "committed_response_lost"])
def test_each_fault_position_is_injected_and_recorded_in_four_steps(
    tmp_path: Path, position: str
) -> None:
    result, out = run(tmp_path, scenario_doc(events__triggers__0__position=position))
    assert result.status.validity == "valid"
    assert fault_stages(out) == ["planned", "armed", "hit", "recovered"]
    recs = records(out)
    hit = next(r for r in recs if r["type"] == "fault.hit")
    answer = next(
        r
        for r in recs
        if r["type"] == "tool.response" and r["payload"]["callId"] == hit["payload"]["callId"]
    )
    changes = [
        r
        for r in recs
        if r["type"] == "state.change" and r["payload"]["cause"] == hit["payload"]["callId"]
    ]
    if position == "not_sent":
        assert answer["payload"]["outcome"] == "connection_failed"
        assert changes == []  # nothing reached the service
        assert result.metrics["blindRetries"] != result.metrics["blindRetries"]  # NaN
    elif position == "sent_not_committed":
        assert answer["payload"]["outcome"] == "timeout"
        # Created processing, then accepted, and the order refunded: each change names its fields.
        assert [c["payload"]["to"]["state"] for c in changes] == [
            "processing",
            "accepted",
            "refunded",
        ]
        assert [c["payload"]["from"] for c in changes] == [
            None,
            {"state": "processing"},
            {"state": "delivered"},
        ]
        processed = next(r for r in recs if r["type"] == "tool.backlog.processed")
        assert processed["seq"] > answer["seq"]
    else:
        assert answer["payload"]["outcome"] == "timeout"
        lost = next(r for r in recs if r["type"] == "tool.response.lost")
        assert lost["payload"]["body"]["refund"]["state"] == "accepted"
        assert lost["seq"] < answer["seq"]


def test_a_held_request_is_settled_while_draining(tmp_path: Path) -> None:
    # The fault recovers only at turn 40, after the conversation: draining recovers it and the
    # service's backlog is processed before the final snapshot.
    doc = scenario_doc(
        events__triggers__0__position="sent_not_committed",
        events__triggers__0__recover={"afterHits": None, "turn": 40},
        user__disclosure__orderNumber="upfront",
    )
    result, out = run(tmp_path, doc)
    recs = records(out)
    draining = next(
        r["seq"] for r in recs if r["type"] == "lifecycle" and r["payload"]["to"] == "DRAINING"
    )
    recovered = next(r for r in recs if r["type"] == "fault.recovered")
    assert recovered["seq"] > draining
    settled = next(r for r in recs if r["type"] == "drain.settled")
    assert settled["payload"] == {"inFlight": 0, "held": 0}
    snapshot = next(r for r in recs if r["type"] == "environment.snapshot")
    assert all(x["state"] != "processing" for x in snapshot["payload"]["refund"])
    assert result.status.validity == "valid"


# --------------------------------------------------------------------------- the user


def test_a_user_who_never_discloses_the_order_number(tmp_path: Path) -> None:
    doc = scenario_doc(user__disclosure__orderNumber="never", events={"triggers": []})
    result, out = run(tmp_path, doc)
    assert result.status.execution == "completed"
    assert result.status.validity == "valid"
    recs = records(out)
    said = [r["payload"]["text"] for r in recs if r["type"] == "user.message"]
    assert said and all("B2026-0901-7734" not in text for text in said)
    assert any(r["type"] == "user.reaction.suppressed" for r in recs) or not any(
        r["type"] == "user.reaction" and r["payload"]["effect"] == "disclose_order_number"
        for r in recs
    )
    assert result.metrics["acceptedAndSatisfied"] == 0.0
    assert result.metrics["duplicateRefunds"] == 0.0
    # Candidates that would have named the number were blocked before sending.
    blocked = [r for r in recs if r["type"] == "user.check"]
    assert all("B2026-0901-7734" in r["payload"]["text"] for r in blocked)
    assert result.integrity.counters.get("userDisclosureViolationsBlocked", 0) == len(blocked)


def test_a_user_with_a_fault_plan_who_never_discloses_leaves_the_fault_unhit(
    tmp_path: Path,
) -> None:
    result, out = run(tmp_path, scenario_doc(user__disclosure__orderNumber="never"))
    assert result.status.validity == "violated"
    failed = next(r for r in records(out) if r["type"] == "fault.failed")
    assert failed["payload"]["reason"] == "never_hit"


# --------------------------------------------------------------------------- boundary


def copy_example(tmp_path: Path) -> Path:
    root = tmp_path / "refund_desk"
    shutil.copytree(EXAMPLE, root)
    return root


def add_asset(root: Path, name: str, version: str, kind: str, content: dict[str, Any]) -> None:
    folder = root / "assets" / name
    folder.mkdir(parents=True, exist_ok=True)
    doc = {"kind": kind, "name": name, "version": version, "content": content}
    (folder / f"{version}.json").write_text(json.dumps(doc), encoding="utf-8")


@pytest.mark.parametrize(
    "overrides",
    [
        {"interaction__toolCallScript": ["create_refund", "create_refund"]},
        {
            "participants": [
                {"id": "planner", "role": "planner", "kind": "surrogate", "replaces": ["reasoning"]}
            ]
        },
        {"executors": [{"kind": "rule", "rule": "random", "agents": [0]}, {"agents": "rest"}]},
        {
            "sut__boundary": ["tool-selection"],
            "executors": [{"kind": "rule", "rule": "random", "agents": [0]}, {"agents": "rest"}],
        },
        {
            "sut__boundary": ["parameters"],
            "executors": [{"kind": "rule", "rule": "random", "agents": [0]}, {"agents": "rest"}],
        },
    ],
    ids=[
        "tool-call-script",
        "surrogate-participant",
        "rule-executor",
        "rule-executor-tool-selection-only",
        "rule-executor-parameters-only",
    ],
)
def test_a_surrogate_inside_the_boundary_is_refused_at_load(
    tmp_path: Path, overrides: dict[str, Any]
) -> None:
    result, out = run(tmp_path, scenario_doc(**overrides))
    assert result.failure is not None
    assert (result.failure.stage, result.failure.type) == ("loading", "sut_boundary_replaced")
    assert result.cost.llm_calls == 0
    assert result.integrity.counters.get("agentCalls") == 0
    assert lifecycle(out) == ["LOADING", "FAILED"]


def test_a_scripted_agent_is_refused_while_tool_selection_is_under_test(tmp_path: Path) -> None:
    root = copy_example(tmp_path)
    add_asset(
        root,
        "scripted-agent",
        "1.0.0",
        "agent",
        {"adapter": "scripted", "script": ["create_refund"]},
    )
    result, _ = run(tmp_path, scenario_doc(sut__agent="scripted-agent@1.0.0"), root=root)
    assert result.failure is not None and result.failure.type == "sut_boundary_replaced"


def test_a_tool_script_is_allowed_when_tool_selection_is_not_under_test(tmp_path: Path) -> None:
    doc = scenario_doc(
        sut__boundary=["reasoning", "parameters", "recovery"],
        interaction__toolCallScript=["get_order"],
        user__disclosure__orderNumber="upfront",
    )
    result, out = run(tmp_path, doc)
    assert result.failure is None
    first_call = next(r for r in records(out) if r["type"] == "tool.request")
    assert first_call["payload"]["tool"] == "get_order"


# --------------------------------------------------------------------------- lifecycle failures


def test_a_budget_that_runs_out_cancels_the_run_and_keeps_its_records(tmp_path: Path) -> None:
    doc = scenario_doc(execution__budget__maxTurns=1)
    result, out = run(tmp_path, doc)
    assert result.failure is not None
    assert (result.failure.stage, result.failure.type) == ("running", "budget_exhausted")
    assert result.status.execution == "cancelled"
    assert result.status.evidence == "partial"
    assert result.status.validity == "violated"  # the planned fault never hit
    # FAILED at once; the run still settles, collects and cleans
    # (tests/kernel/testbed/test_testbed_faithful.py).
    assert lifecycle(out)[-2:] == ["RUNNING", "FAILED"]
    assert "user.message" in types(out)
    checks = read(out, "completeness.json")["checks"]
    assert checks["conversation_closed"]["status"] == "missing"
    observations = read(out, "observations.json")
    assert "conversation.closed_by" in {m["factKey"] for m in observations["missing"]}
    verdicts = {c["verdict"] for c in evaluated(out)["criteria"].values()}
    assert verdicts == {"undecidable"}


def test_a_failed_cleanup_makes_the_run_violated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(path: Path) -> None:
        raise OSError("device busy")

    monkeypatch.setattr(collecting, "remove_workspace", refuse)
    result, out = run(tmp_path)
    assert result.status.execution == "completed"
    assert result.status.validity == "violated"
    assert result.integrity.counters["cleanupFailures"] == 1
    failed = next(r for r in records(out) if r["type"] == "cleanup.failed")
    assert failed["payload"]["alert"] is True


def test_a_failed_initialisation_crashes_and_violates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(domain: Any) -> Any:
        raise ValueError("seed data unreadable")

    monkeypatch.setattr(desk_run, "DomainState", broken)
    result, out = run(tmp_path)
    assert result.failure is not None and result.failure.stage == "initializing"
    assert (result.status.execution, result.status.validity) == ("crashed", "violated")
    assert lifecycle(out) == ["LOADING", "INITIALIZING", "FAILED"]
    assert not (out / "workspace").exists()


@pytest.mark.parametrize(
    ("overrides", "kind"),
    [
        ({"environment__data": "env/ecom-seed@stable-old"}, "manifest_unresolved"),
        ({"user__simulator": "refund-api@1.4.0"}, "manifest_unresolved"),
        ({"sut__prompt": None}, "manifest_unresolved"),
        ({"user__privateFacts__orderNumber": "B2026-0000-0000"}, "entity_binding_mismatch"),
        ({"events__triggers__0__target": "cancel_order"}, "fault_plan_incomplete"),
        (
            {"events__triggers__0__at": {"turn": 2}, "events__triggers__0__recover": {"turn": 2}},
            "fault_plan_incomplete",
        ),
        (
            {"events__triggers__0__at": {"turn": 3}, "events__triggers__0__recover": {"turn": 1}},
            "fault_plan_incomplete",
        ),
        (
            {"interaction__entityBinding": {"tool.order_no": "env.order.id"}},
            "entity_binding_mismatch",
        ),
    ],
    ids=[
        "unknown-label",
        "wrong-kind",
        "no-prompt",
        "unbound-order",
        "unknown-fault-target",
        "recover-turn-equals-at-turn",
        "recover-turn-before-at-turn",
        "binding-key-not-a-user-fact",
    ],
)
def test_loading_refuses_an_inconsistent_scenario(
    tmp_path: Path, overrides: dict[str, Any], kind: str
) -> None:
    result, _ = run(tmp_path, scenario_doc(**overrides))
    assert result.failure is not None
    assert (result.failure.stage, result.failure.type) == ("loading", kind)
    assert result.integrity.counters.get("agentCalls") == 0


def test_scenario_checks_of_the_world(tmp_path: Path) -> None:
    from simreport.core.errors import SchemaError

    doc = scenario_doc()
    for path, value, where in [
        ("population.n", 3, "population.n"),
        ("execution.seed", 7, "execution.seed"),
    ]:
        with pytest.raises(SchemaError) as info:
            validate_scenario(set_path(doc, path, value))
        assert info.value.path == where
    bare = {k: v for k, v in doc.items() if k != "sut"}
    with pytest.raises(SchemaError) as info:
        validate_scenario(bare)
    assert info.value.path == "sut"


def test_a_turn_window_fault_in_the_design_documents_form(tmp_path: Path) -> None:
    trigger = {
        "target": "create_refund",
        "effect": "timeout",
        "at": "turn-1",
        "recover": "turn-2",
        "position": "committed",
    }
    # With the order number upfront the agent submits in the first turn, inside the window.
    doc = scenario_doc(events={"triggers": [trigger]}, user__disclosure__orderNumber="upfront")
    hits = 0
    for seed in range(3):
        result, out = run(tmp_path, set_path(doc, "seedPath", [seed]), name=f"s{seed}")
        stages = fault_stages(out, "fault-1")
        assert stages[:2] == ["planned", "armed"]
        if "hit" in stages:
            hits += 1
            assert stages[-1] == "recovered" and result.status.validity == "valid"
        else:
            assert stages[-1] == "failed" and result.status.validity == "violated"
    assert hits > 0


def test_a_binding_key_in_the_tool_form_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    doc = scenario_doc(interaction__entityBinding={"tool.order_no": "env.order.id"})
    result, _ = run(tmp_path, doc)
    assert result.failure is not None
    assert (result.failure.stage, result.failure.type) == ("loading", "entity_binding_mismatch")
    message = result.failure.message
    assert "tool.order_no" in message and "user.orderNumber" in message
    assert "None" not in message


def test_a_recover_turn_after_the_at_turn_loads(tmp_path: Path) -> None:
    doc = scenario_doc(
        events__triggers__0__at={"turn": 1},
        events__triggers__0__recover={"turn": 2},
        user__disclosure__orderNumber="upfront",
    )
    result, _ = run(tmp_path, doc)
    assert result.failure is None or result.failure.stage != "loading"


# --------------------------------------------------------------------------- lost decisions


def _lost_first_agent_decision(body: dict[str, Any], options: list[str]) -> str:
    """A model that answers nonsense to the agent's first decision and the first option after."""
    if "ask for the order number" in options and not _LOST["agent"]:
        _LOST["agent"] += 1
        return "no such option at all"
    return options[0] if options else "ok"


_LOST: dict[str, int] = {"agent": 0}


def run_with_a_lost_agent_decision(
    tmp: Path, monkeypatch: pytest.MonkeyPatch, name: str = "lost", **overrides: Any
) -> tuple[RunResult, Path]:
    from tests.support.llm_server import FakeLLM

    monkeypatch.setenv("SIMREPORT_CACHE_MODE", "live")
    monkeypatch.setitem(_LOST, "agent", 0)
    with FakeLLM(answer=_lost_first_agent_decision) as server:
        llm = {"provider": "openai", "model": "test", "baseUrl": server.url, "temperature": 0}
        llm.update(overrides)
        return run(tmp, scenario_doc(llm=llm), name=name)


def test_a_lost_decision_is_not_the_agents_behaviour(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result, out = run_with_a_lost_agent_decision(tmp_path, monkeypatch)
    assert result.integrity.counters["parseFailures"] == 1
    lost = [
        r for r in records(out) if r["type"] == "agent.decision" and r["payload"]["chosen"] is None
    ]
    assert len(lost) == 1 and lost[0]["payload"]["failure"] == "parse"
    kinds = types(out)
    assert "agent.silent" not in kinds  # a lost decision is not the agent falling silent
    assert "agent.decision_lost" in kinds
    assert "agentSilentSteps" not in result.integrity.counters
    assert result.status.evidence == "partial"
    assert result.integrity.complete is False
    checks = read(out, "completeness.json")["checks"]
    assert checks["provider_decisions"]["status"] == "missing"
    evaluation = evaluated(out)
    assert {c["verdict"] for c in evaluation["criteria"].values()} == {"undecidable"}
    assert evaluation["checks"]["recordsComplete"]["passed"] is False


def test_the_engine_never_reports_complete_evidence_when_decisions_were_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = refund_desk.RefundDeskRun._collect

    def claims_complete(self: Any) -> Any:
        obs, _ = original(self)
        return obs, "complete"

    monkeypatch.setattr(refund_desk.RefundDeskRun, "_collect", claims_complete)
    result, _ = run_with_a_lost_agent_decision(tmp_path, monkeypatch)
    assert result.integrity.counters["parseFailures"] == 1
    assert result.status.evidence == "partial"
    assert result.integrity.complete is False


# --------------------------------------------------------------------------- evidence status


def test_evidence_is_partial_when_an_observation_is_missing(tmp_path: Path) -> None:
    doc = scenario_doc(
        interaction__entityBinding={},
        user__privateFacts__orderNumber="B2026-0000-0001",
    )
    result, out = run(tmp_path, doc)
    assert result.failure is None
    missing = {m["factKey"] for m in read(out, "observations.json")["missing"]}
    assert {"refund.count", "order.paid_amount_minor"} <= missing
    assert result.status.evidence == "partial"
    assert result.integrity.complete is False


def test_an_error_after_the_refund_took_effect_is_ambiguous(tmp_path: Path) -> None:
    doc = scenario_doc(events__triggers__0__effect="error")
    result, out = run(tmp_path, doc)
    assert result.failure is None
    facts = {o["factKey"]: o["value"] for o in read(out, "observations.json")["observations"]}
    assert facts["agent.ambiguous_outcomes"] == 1
    assert "agent.after_ambiguous" in facts
    assert result.metrics["blindRetries"] in (0.0, 1.0)
