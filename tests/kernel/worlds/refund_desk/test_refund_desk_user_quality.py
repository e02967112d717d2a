"""The user simulator's quality control (design §四 "独立质控") and its two modes: per-run checks on
crafted records, the thresholds' consequences for a run, diversity per condition, exploration
against regression, and a separate model for the user's wording (`user.llm`)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from simreport.analysis.audit import exclusion_reasons, user_quality_unchecked
from simreport.analysis.audit_document import UserQualitySection
from simreport.analysis.user_quality import UserQualityRun, summarise_user_quality
from simreport.core.errors import InputError
from simreport.core.schema import RunResult
from simreport.core.testbed_schema import ClockConfig, ReactionRule, UserConfig
from simreport.kernel import load_scenario, run_scenario, validate_scenario
from simreport.kernel.providers import make_provider
from simreport.kernel.testbed.clock import Clocks
from simreport.kernel.testbed.lifecycle import initializing
from simreport.kernel.testbed.records import RecordLog, read_records
from simreport.kernel.worlds.refund_desk.user import UserSimulator
from simreport.kernel.worlds.refund_desk.user_quality import NamedRule, assess_run
from simreport.report.testbed_tables import user_quality

EXAMPLE = Path(__file__).resolve().parents[4] / "examples" / "refund_desk"
ORDER = "B2026-0901-7734"
PATTERN = r"B\d{4}-\d{4}-\d{4}"
ASK = "Could you please tell me your order number?"


# --------------------------------------------------------------------------- crafted records


def config(**user: Any) -> UserConfig:
    doc: dict[str, Any] = {
        "policy": "user-policy@stable",
        "simulator": "user-sim@stable",
        "persona": {"patience": "low", "tone": "annoyed"},
        "goal": "Get my refund",
        "privateFacts": {"orderNumber": ORDER, "paidAmountMinor": 19900},
        "disclosure": {"orderNumber": "on-request"},
    }
    doc.update(user)
    return UserConfig.model_validate(doc)


class Conversation:
    """Records as a run writes them: user and agent messages, reactions, the closing."""

    def __init__(self) -> None:
        self.clocks = Clocks(ClockConfig())
        self.log = RecordLog(self.clocks, "q" * 32)
        self.turn = 0

    def user(self, intent: str, text: str, *, advance_ms: int = 20_000) -> Conversation:
        if self.turn:
            self.clocks.advance(advance_ms)
        self.turn += 1
        self.log.add(
            "user.message", "user", "message", {"turn": self.turn, "intent": intent, "text": text}
        )
        return self

    def agent(self, text: str, *signals: str) -> Conversation:
        self.log.add(
            "agent.message",
            "agent",
            "message",
            {"turn": self.turn, "text": text, "signals": ["agent.reply", *signals]},
        )
        return self

    def reaction(self, rule: str, effect: str, turn: int) -> Conversation:
        self.log.add(
            "user.reaction", "user", "control", {"rule": rule, "effect": effect, "turn": turn}
        )
        return self

    def closed(self, by: str) -> list[dict[str, Any]]:
        self.log.add("conversation.closed", "harness", "control", {"closedBy": by})
        return self.log.records


def assess(
    records: list[dict[str, Any]],
    user: UserConfig | None = None,
    rules: list[NamedRule] | None = None,
    give_up_ms: int = 180_000,
) -> dict[str, Any]:
    return assess_run(
        records,
        user or config(),
        rules=rules or [],
        give_up_ms=give_up_ms,
        order_pattern=PATTERN,
        mode="regression",
    )


DISCLOSE = NamedRule(
    "scenario.0", ReactionRule(when="agent.asks_order_number", effect="disclose_order_number")
)
DONE = f"Your refund of 199.00 for order {ORDER} has been accepted."


def good_conversation() -> list[dict[str, Any]]:
    return (
        Conversation()
        .user("open", "I want my refund of 199.00")
        .agent(ASK, "agent.asks_order_number")
        .reaction("scenario.0", "disclose_order_number", 2)
        .user("provide_order_number", f"My order number is {ORDER}")
        .agent(DONE, "agent.confirms_refund")
        .user("confirm_and_close", "Thanks that is all I needed")
        .closed("resolved_by_user")
    )


def test_a_conversation_that_keeps_every_rule_passes_every_check() -> None:
    doc = assess(good_conversation(), rules=[DISCLOSE])
    assert {k: v["status"] for k, v in doc["checks"].items()} == {
        "personaConsistency": "pass",
        "reactionCompliance": "pass",
        "visibility": "pass",
        "termination": "pass",
    }
    assert doc["checks"]["reactionCompliance"]["rate"] == 1.0
    assert doc["checks"]["visibility"]["disclosures"] == 2  # the amount upfront, the number asked
    assert doc["path"] == ["open", "provide_order_number", "confirm_and_close"]
    assert doc["opening"] == "I want my refund of 199.00"
    assert doc["failed"] == [] and doc["disposition"]["validity"] is None


def test_a_style_contradiction_marks_the_run_for_review_without_violating_it() -> None:
    records = (
        Conversation()
        .user("open", "I want my refund of 199.00")
        .agent("Please wait a moment.", "agent.asks_to_wait")
        .user("acknowledge_wait", "No rush, take your time")
        .agent(DONE, "agent.confirms_refund")
        .user("confirm_and_close", "Thanks")
        .closed("resolved_by_user")
    )
    doc = assess(records)
    persona = doc["checks"]["personaConsistency"]
    assert persona["status"] == "review" and persona["rate"] == pytest.approx(2 / 3)
    assert persona["flagged"][0]["turn"] == 2
    problem = persona["flagged"][0]["problems"][0]
    assert "'no rush'" in problem and "annoyed" in problem  # the phrase and the persona's tone
    assert doc["failed"] == ["personaConsistency"]
    assert doc["disposition"]["validity"] is None and doc["disposition"]["review"]
    # A declared list replaces the built-in one for that value; a lower threshold tolerates it.
    lenient = config(
        qualityControl={
            "styleContradictions": {"tone": {"annoyed": ["ridiculous"]}},
            "minPersonaConsistency": 0.5,
        }
    )
    assert assess(records, lenient)["checks"]["personaConsistency"]["status"] == "pass"


def test_a_fact_outside_the_users_knowledge_breaks_persona_and_visibility() -> None:
    records = (
        Conversation()
        .user("open", "I want my refund of 150.00")
        .agent(DONE, "agent.confirms_refund")
        .user("confirm_and_close", "Thanks")
        .closed("resolved_by_user")
    )
    doc = assess(records)
    assert "150.00" in doc["checks"]["personaConsistency"]["flagged"][0]["problems"][0]
    assert doc["checks"]["visibility"]["status"] == "fail"
    assert doc["disposition"]["validity"] == "violated"
    assert "visibility" in doc["failed"]


def test_disclosing_the_order_number_before_anyone_asked_is_a_visibility_violation() -> None:
    records = (
        Conversation()
        .user("open", f"Refund order {ORDER} please")
        .agent(DONE, "agent.confirms_refund")
        .user("confirm_and_close", "Thanks")
        .closed("resolved_by_user")
    )
    doc = assess(records)
    [violation] = doc["checks"]["visibility"]["violations"]
    assert violation["turn"] == 1
    # The fact, its value and the rule it broke.
    assert all(word in violation["problem"] for word in ("orderNumber", ORDER, "on-request"))
    assert doc["disposition"]["validity"] == "violated"
    # Declared upfront, the same message is fine; a higher allowance tolerates one violation.
    assert assess(records, config(disclosure={"orderNumber": "upfront"}))["failed"] == []
    tolerant = config(qualityControl={"maxVisibilityViolations": 1})
    assert assess(records, tolerant)["disposition"]["validity"] is None


def test_a_trigger_without_its_reaction_violates_the_run() -> None:
    records = (
        Conversation()
        .user("open", "I want my refund of 199.00")
        .agent(ASK, "agent.asks_order_number")
        .user("withhold_order_number", "I do not have the order number at hand")
        .agent(DONE, "agent.confirms_refund")
        .user("confirm_and_close", "Thanks")
        .closed("resolved_by_user")
    )
    doc = assess(records, rules=[DISCLOSE])
    reaction = doc["checks"]["reactionCompliance"]
    assert reaction["status"] == "fail" and reaction["rate"] == 0.0
    assert reaction["items"][0]["outcome"] == "missed"
    assert doc["disposition"]["validity"] == "violated"
    [problem] = doc["problems"]
    assert "scenario.0" in problem and "disclose_order_number" in problem
    # Fired but not carried out: still a violation.
    fired = (
        Conversation()
        .user("open", "I want my refund of 199.00")
        .agent(ASK, "agent.asks_order_number")
        .reaction("scenario.0", "disclose_order_number", 2)
        .user("ask_status", "Any news on my refund?")
        .agent(DONE, "agent.confirms_refund")
        .user("confirm_and_close", "Thanks")
        .closed("resolved_by_user")
    )
    item = assess(fired, rules=[DISCLOSE])["checks"]["reactionCompliance"]["items"][0]
    assert item["outcome"] == "not_carried_out" and "ask_status" in item["detail"]
    # A lower threshold accepts it.
    half = config(qualityControl={"minReactionCompliance": 0.0})
    assert assess(records, half, rules=[DISCLOSE])["disposition"]["validity"] is None


def test_a_wait_rule_is_recomputed_from_the_logical_clock() -> None:
    rule = NamedRule("policy.0", ReactionRule(when="wait_ms > 30000", effect="threaten_complaint"))
    records = (
        Conversation()
        .user("open", "I want my refund of 199.00")
        .agent("Checking.")
        .user("ask_status", "Any news on my refund?", advance_ms=40_000)
        .closed("user_gave_up")
    )
    item = assess(records, rules=[rule])["checks"]["reactionCompliance"]["items"][0]
    assert item["outcome"] == "missed" and item["turn"] == 2


def test_stopping_without_the_rules_reason_leaves_validity_unchecked() -> None:
    records = (
        Conversation()
        .user("open", "I want my refund of 199.00")
        .agent("Let me look.")
        .user("give_up", "Forget it I am done with this")
        .closed("user_gave_up")
    )
    doc = assess(records)
    ended = doc["checks"]["termination"]
    assert (ended["status"], ended["closedBy"]) == ("fail", "user_gave_up")
    [problem] = ended["problems"]
    assert problem.startswith("turn 2:") and "give_up" in problem
    assert doc["disposition"]["validity"] == "unchecked"
    # Patience spent is a reason; `termination: report` only reports.
    assert assess(records, give_up_ms=10_000)["checks"]["termination"]["status"] == "pass"
    reported = assess(records, config(qualityControl={"termination": "report"}))
    assert reported["disposition"]["validity"] is None and reported["disposition"]["review"]
    # Going on after a confirmed refund is as wrong as stopping early.
    went_on = (
        Conversation()
        .user("open", "I want my refund of 199.00")
        .agent(DONE, "agent.confirms_refund")
        .user("ask_status", "Any news on my refund?")
        .closed("user_gave_up")
    )
    [problem] = assess(went_on)["checks"]["termination"]["problems"]
    assert "ask_status" in problem and "confirm_and_close" in problem  # said, and what was due


def test_an_unchecked_run_is_excluded_with_its_reason() -> None:
    doc = assess(
        Conversation()
        .user("open", "I want my refund of 199.00")
        .agent("Let me look.")
        .user("give_up", "Forget it")
        .closed("user_gave_up")
    )
    result = RunResult.model_validate(
        {
            "condition": "c",
            "replication": 0,
            "seedPath": [0],
            "status": {"execution": "completed", "validity": "unchecked", "evidence": "complete"},
            "metrics": {"turns": 2.0},
            "integrity": {"complete": True, "counters": {}},
        }
    )
    [problem] = user_quality_unchecked(doc)
    reasons = exclusion_reasons(result, True, unchecked_problems=[problem])
    assert len(reasons) == 1 and "unchecked" in reasons[0] and reasons[0].endswith(problem)
    assert exclusion_reasons(result, True) == []  # an unchecked run of another world enters


# --------------------------------------------------------------------------- diversity


def quality(mode: str, opening: str, path: list[str]) -> dict[str, Any]:
    doc = assess(good_conversation(), rules=[DISCLOSE])
    return {**doc, "mode": mode, "opening": opening, "path": path}


def test_diversity_per_condition_flags_a_batch_that_never_varies() -> None:
    conditions = [{"id": "same"}, {"id": "varied"}, {"id": "pinned"}, {"id": "drifting"}]
    runs = (
        [UserQualityRun("same", quality("exploration", "Hi", ["open", "give_up"]))] * 3
        + [
            UserQualityRun("varied", quality("exploration", f"Hi {i}", ["open", str(i)]))
            for i in range(3)
        ]
        + [UserQualityRun("pinned", quality("regression", "Hi", ["open"]))] * 3
        + [UserQualityRun("drifting", quality("regression", f"Hi {i}", ["open"])) for i in range(2)]
    )
    section = summarise_user_quality(conditions, runs)
    assert section is not None
    rows = {row["condition"]: row for row in section["conditions"]}
    assert rows["same"]["diversity"] == {
        "distinctOpenings": 1,
        "distinctPaths": 1,
        "openingShare": pytest.approx(1 / 3),
        "pathShare": pytest.approx(1 / 3),
    }
    # Too few openings and too few paths; a regression user whose openings drift.
    assert ["openings" in flag for flag in rows["same"]["flags"]] == [True, False]
    assert rows["varied"]["flags"] == [] and rows["pinned"]["flags"] == []
    assert rows["drifting"]["diversity"]["distinctOpenings"] == 2
    [flag] = rows["drifting"]["flags"]
    assert "regression" in flag
    assert rows["same"]["reactionCompliance"] == {
        "triggers": 3,
        "compliant": 3,
        "rate": 1.0,
        "runsViolated": 0,
    }
    assert rows["same"]["termination"]["compliant"] == 3
    assert summarise_user_quality(conditions, [UserQualityRun("same", None)]) is None
    rendered = user_quality(UserQualitySection.model_validate(section), {})
    assert rendered is not None and rendered["rows"][0]["openings"] == "1"


# --------------------------------------------------------------------------- runs


def scenario_doc(**user: Any) -> dict[str, Any]:
    doc = load_scenario(EXAMPLE / "scenario.yaml").scenario.to_doc()
    doc = copy.deepcopy(doc)
    doc["user"].update(user)
    return doc


def run(tmp: Path, doc: dict[str, Any], name: str, **kwargs: Any) -> tuple[RunResult, Path]:
    out = tmp / name
    scenario = validate_scenario(doc).model_copy(update=kwargs)
    return run_scenario(scenario, out, asset_root=EXAMPLE), out


def user_messages(out: Path) -> list[tuple[str, str]]:
    return [
        (r["payload"]["intent"], r["payload"]["text"])
        for r in read_records(out / "records.jsonl")
        if r["type"] == "user.message"
    ]


def test_a_run_writes_its_quality_control_and_the_manifest_names_the_mode(tmp_path: Path) -> None:
    result, out = run(tmp_path, scenario_doc(), "r")
    assert result.status.validity == "valid"
    doc = json.loads((out / "user-quality.json").read_text())
    assert doc["mode"] == "exploration" and doc["failed"] == []
    facts = {
        o["factKey"]: o["value"]
        for o in json.loads((out / "observations.json").read_text())["observations"]
    }
    assert facts["user.qc.reaction_compliance"] == 1.0 and facts["user.qc.failed"] == []
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["userSimulator"]["mode"] == "exploration"
    assert manifest["userSimulator"]["modeFrom"] == "purpose"
    assert manifest["userSimulator"]["llm"]["from"] == "llm"


def test_a_simulator_whose_own_check_fails_is_caught_and_violates_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A broken simulator: its wording names the order number the user may never give, and its
    # pre-send check lets everything through. Quality control reads the records independently.
    fill = UserSimulator._fill
    monkeypatch.setattr(
        UserSimulator, "_fill", lambda self, template: f"{fill(self, template)} (order {ORDER})"
    )
    monkeypatch.setattr(UserSimulator, "check", lambda self, intent, text: [])
    doc = scenario_doc(
        disclosure={"orderNumber": "never", "paidAmount": "upfront"}, mode="regression"
    )
    doc["user"]["behavior"] = {"reactionRules": []}
    result, out = run(tmp_path, doc, "leaky")
    said = [text for _, text in user_messages(out)]
    assert any(ORDER in text for text in said), said
    assert result.status.validity == "violated"
    quality_doc = json.loads((out / "user-quality.json").read_text())
    assert "visibility" in quality_doc["failed"]
    assert result.integrity.counters["userQualityFailed:visibility"] == 1
    validity = next(r for r in read_records(out / "records.jsonl") if r["type"] == "run.validity")
    assert quality_doc["problems"]
    assert set(quality_doc["problems"]) <= set(validity["payload"]["problems"])


def test_exploration_varies_and_regression_pins_the_users_path(tmp_path: Path) -> None:
    def batch(mode: str) -> list[list[tuple[str, str]]]:
        doc = scenario_doc(mode=mode)
        return [
            user_messages(run(tmp_path, doc, f"{mode}-{r}", seed_path=[r], replication_id=r)[1])
            for r in range(4)
        ]

    explored = batch("exploration")
    assert len({tuple(m) for m in explored}) > 1  # different openings or paths
    assert len({m[0] for m in explored}) > 1 or len({tuple(i for i, _ in m) for m in explored}) > 1
    pinned = batch("regression")
    assert len({m[0] for m in pinned}) == 1  # the opening never depends on the replication
    # Exploration is seeded, not random: the same seeds give the same conversation.
    again = user_messages(
        run(tmp_path, scenario_doc(mode="exploration"), "again", seed_path=[2], replication_id=2)[1]
    )
    assert again == explored[2]
    branches = [
        r
        for r in read_records(tmp_path / "exploration-0" / "records.jsonl")
        if r["type"] == "user.branch"
    ]
    assert not any(
        r["type"] == "user.branch"
        for r in read_records(tmp_path / "regression-0" / "records.jsonl")
    )
    assert all(r["payload"]["chosen"] in r["payload"]["options"] for r in branches)


def test_regression_pins_wording_given_the_same_agent() -> None:
    """With the same agent messages, a regression user says the same whatever its generator; an
    exploring one varies with its seed."""
    import numpy as np
    import yaml

    from simreport.kernel.testbed.assets import SimulatorConfigAsset, UserPolicyAsset

    def content(path: str) -> Any:
        return yaml.safe_load((EXAMPLE / "assets" / path).read_text())["content"]

    provider = make_provider(load_scenario(EXAMPLE / "scenario.yaml").scenario.llm)

    def conversation(mode: str, seed: int) -> list[str]:
        clocks = Clocks(ClockConfig())
        seeds: list[int | None] = []

        def decide(request: Any) -> Any:
            from simreport.kernel import prompts
            from simreport.kernel.providers import ChatRequest
            from simreport.kernel.world import Decision

            seeds.append(request.seed)
            messages = prompts.render(
                request,
                {},
                load_scenario(EXAMPLE / "scenario.yaml").scenario.prompt,
                ("instructions", "memory", "goals"),
            )
            answer = provider.complete(
                ChatRequest(
                    messages=messages,
                    model="offline-base",
                    temperature=0.0,
                    max_tokens=64,
                    seed=request.seed if request.seed is not None else seed,
                    options=request.options,
                )
            )
            return Decision(prompts.parse_answer(answer.text, request.options), "llm")

        simulator = UserSimulator(
            config=config(disclosure={"orderNumber": "upfront"}),
            policy=UserPolicyAsset.model_validate(content("user-policy/1.2.0.yaml")),
            wording=SimulatorConfigAsset.model_validate(content("user-sim/1.0.0.yaml")),
            log=RecordLog(clocks, "w" * 32),
            clocks=clocks,
            decide=decide,
            mode=mode,  # type: ignore[arg-type]
            rng=np.random.default_rng(seed),
            seed=7,
        )
        said = [simulator.opening().text or ""]
        for text in ("Let me check.", "Please wait a moment.", "Still checking."):
            clocks.advance(20_000)
            said.append(simulator.reply([text]).text or "")
        return said

    assert len({tuple(conversation("regression", s)) for s in range(5)}) == 1
    assert len({tuple(conversation("exploration", s)) for s in range(5)}) > 1


def test_user_llm_words_the_user_with_its_own_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []
    real = initializing.make_provider

    def recording(config: Any, *, path: str = "llm.provider") -> Any:
        provider = real(config, path=path)
        original = provider.complete_many

        def complete_many(requests: Any) -> Any:
            seen.extend(r.model for r in requests)
            return original(requests)

        provider.complete_many = complete_many  # type: ignore[method-assign]
        return provider

    monkeypatch.setattr(initializing, "make_provider", recording)
    doc = scenario_doc(llm={"provider": "offline", "model": "offline-user", "temperature": 0.3})
    result, out = run(tmp_path, doc, "user-llm")
    assert result.status.execution == "completed"
    wording = result.integrity.counters["userWordingDecisions"]
    assert seen and set(seen) == {"offline-user"} and len(seen) <= wording
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["userSimulator"]["llm"] == {
        "from": "user.llm",
        "provider": "offline",
        "model": "offline-user",
        "temperature": 0.3,
    }
    assert manifest["model"] == "offline-base"  # the SUT's model is unchanged
    assert result.cost.segments["userWording"].llm_calls == len(seen)


def test_a_regression_run_refuses_an_exploring_user(tmp_path: Path) -> None:
    from simreport.core.versions import RunChecks

    scenario = validate_scenario(scenario_doc(mode="exploration"))
    result = run_scenario(
        scenario, tmp_path / "conflict", asset_root=EXAMPLE, checks=RunChecks(purpose="regression")
    )
    assert result.failure is not None and result.failure.stage == "loading"
    assert result.failure.type == "user_mode_conflict"


@pytest.mark.parametrize(
    ("key", "value", "path"),
    [
        ("mode", "sometimes", "user.mode"),
        ("llm", {"provider": "nowhere", "model": "m"}, "user.llm.provider"),
        (
            "qualityControl",
            {"minReactionCompliance": 1.5},
            "user.qualityControl.minReactionCompliance",
        ),
        (
            "qualityControl",
            {"styleContradictions": {"mood": {}}},
            "user.qualityControl.styleContradictions",
        ),
    ],
)
def test_bad_values_are_refused_where_they_are(key: str, value: Any, path: str) -> None:
    with pytest.raises(InputError) as caught:
        validate_scenario(scenario_doc(**{key: value}), file="scenario.yaml")
    assert path in caught.value.one_line()
