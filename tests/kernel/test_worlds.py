"""The built-in worlds: parameter validation, their pure pieces (pairing, network, feed, metrics),
fallbacks for lost decisions, and whole runs through a run context."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from simreport.core.errors import InputError
from simreport.core.schema import LLMConfig, Model, Scenario
from simreport.kernel.context import RunContext
from simreport.kernel.events import EventLog
from simreport.kernel.policies import POLICIES
from simreport.kernel.prompts import parse_answer
from simreport.kernel.providers import make_provider
from simreport.kernel.providers.base import ChatRequest, ChatResponse, Provider
from simreport.kernel.world import WorldOutcome
from simreport.kernel.worlds import WORLDS
from simreport.kernel.worlds.echo_chamber import (
    STANCES,
    EchoChamberParams,
    assign_groups,
    assortativity,
    build_network,
    choose_treated,
    echo_metrics,
    extreme_share,
    follow_edges,
    polarization,
    select_feed,
    stance_value,
    within_group_share,
)
from simreport.kernel.worlds.prisoners_dilemma import (
    Payoffs,
    PrisonersDilemmaParams,
    pairings,
    pd_metrics,
    pd_payoffs,
)

# --------------------------------------------------------------------------- helpers


class GarbageProvider(Provider):
    """Answers nothing the parser accepts, so every LLM decision is lost."""

    name = "garbage"

    def complete(self, request: ChatRequest) -> ChatResponse:
        return ChatResponse(text="I would rather not say.", prompt_tokens=1, completion_tokens=1)


def run_world(
    doc: dict[str, Any], provider: Provider | None = None
) -> tuple[WorldOutcome, RunContext]:
    """Run a scenario's world directly through a run context (no run directory)."""
    scenario = Scenario.model_validate(doc)
    world_cls = WORLDS.get(scenario.world or "")
    params = world_cls.Params.model_validate(scenario.params)
    policy_cls = POLICIES.get(scenario.policy.name)
    policy = policy_cls(
        policy_cls.Options.model_validate(scenario.policy.options), scenario.population.n
    )
    if provider is None and any(e.kind == "llm" for e in scenario.executors):
        provider = make_provider(scenario.llm)
    ctx = RunContext(scenario, params, provider=provider, policy=policy, events=EventLog())
    return world_cls(ctx, params).run(), ctx


def problems(doc: dict[str, Any]) -> list[tuple[str, str]]:
    scenario = Scenario.model_validate(doc)
    world_cls = WORLDS.get(scenario.world or "")
    return world_cls.check(scenario, world_cls.Params.model_validate(scenario.params))


def test_both_worlds_are_registered_with_documented_params() -> None:
    assert {"prisoners_dilemma", "echo_chamber"} <= set(WORLDS.names())
    for name in ("prisoners_dilemma", "echo_chamber"):
        world = WORLDS.get(name)
        assert world.name == name
        assert issubclass(world.Params, Model)
        for field in world.Params.model_fields.values():
            assert field.description, f"{name}: a parameter has no description"


# --------------------------------------------------------------------------- prisoner's dilemma


def test_pd_params_defaults_and_camel_case_keys() -> None:
    params = PrisonersDilemmaParams.model_validate({"memoryWindow": 2, "matching": "random"})
    assert params.memory_window == 2
    assert params.framing == "neutral"
    assert params.payoffs == Payoffs.model_validate({})
    doc = PrisonersDilemmaParams.model_validate({}).to_doc()
    assert doc == {
        "framing": "neutral",
        "memoryWindow": 5,
        "payoffs": {"temptation": 5.0, "reward": 3.0, "punishment": 1.0, "sucker": 0.0},
        "matching": "fixed",
    }


@pytest.mark.parametrize(
    "payoffs",
    [
        {"temptation": 3, "reward": 5},  # T < R
        {"punishment": 3},  # R == P
        {"sucker": 2},  # S > P
        {"temptation": 7, "reward": 3, "sucker": 0},  # 2R < T + S
        {"temptation": 6, "reward": 3, "sucker": 0},  # 2R == T + S
    ],
)
def test_pd_payoffs_that_are_no_dilemma_are_rejected(payoffs: dict[str, float]) -> None:
    with pytest.raises(ValidationError):
        PrisonersDilemmaParams.model_validate({"payoffs": payoffs})


@pytest.mark.parametrize(
    "params",
    [
        {"memory_window": 3},  # snake case is the Python name, not the document key
        {"rounds": 3},
        {"payoffs": {"bonus": 1}},
        {"framing": "emotional"},
        {"matching": "nearest"},
        {"memoryWindow": -1},
    ],
)
def test_pd_params_reject_unknown_or_invalid_keys(params: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        PrisonersDilemmaParams.model_validate(params)


def test_pd_needs_an_even_population() -> None:
    base = {"world": "prisoners_dilemma", "steps": 3}
    assert problems({**base, "population": {"n": 4}}) == []
    assert [p for p, _ in problems({**base, "population": {"n": 5}})] == ["population.n"]
    assert "population.n" in [p for p, _ in problems({**base, "population": {"n": 1}})]


def test_pd_payoff_table() -> None:
    own = np.array([True, True, False, False])
    partner = np.array([True, False, True, False])
    assert pd_payoffs(own, partner, Payoffs()).tolist() == [3.0, 0.0, 5.0, 1.0]


def test_pd_metrics_on_a_hand_made_game() -> None:
    # Two pairs, two rounds. Round 1: pair A both cooperate, pair B 2 cooperates, 3 defects.
    # Round 2: everyone defects except agent 0.
    moves = np.array([[True, True, True, False], [True, False, False, False]])
    partners = np.array([[1, 0, 3, 2], [1, 0, 3, 2]])
    metrics = pd_metrics(moves, partners, Payoffs())
    assert metrics["cooperationRate"] == pytest.approx(4 / 8)
    assert metrics["mutualCooperationRate"] == pytest.approx(1 / 4)
    # Points: round 1: 3, 3, 0, 5; round 2: 0, 5, 1, 1 → 18 over 8 agent-rounds.
    assert metrics["averagePayoff"] == pytest.approx(18 / 8)


@pytest.mark.parametrize("matching", ["fixed", "random"])
def test_pairings_are_perfect_matchings(matching: str) -> None:
    rng = np.random.default_rng(3)
    partner = pairings(10, matching, rng)
    assert (partner[partner] == np.arange(10)).all()
    assert (partner != np.arange(10)).all()
    if matching == "fixed":
        assert partner.tolist() == [1, 0, 3, 2, 5, 4, 7, 6, 9, 8]


def test_random_matching_changes_partners() -> None:
    rng = np.random.default_rng(0)
    rounds = {tuple(pairings(10, "random", rng).tolist()) for _ in range(5)}
    assert len(rounds) > 1


def pd_doc(**over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"world": "prisoners_dilemma", "steps": 4, "seed": 7}
    doc["population"] = {"n": 4}
    doc.update(over)
    return doc


def test_pd_rule_executors_see_partner_history() -> None:
    # Agent 0 plays tit-for-tat against an always-defecting agent 1; agents 2 and 3 play
    # grim trigger against each other.
    doc = pd_doc(
        executors=[
            {"kind": "rule", "rule": "tit_for_tat", "agents": [0]},
            {
                "kind": "rule",
                "rule": "constant",
                "agents": [1],
                "options": {"params": {"option": "defect"}},
            },
            {"kind": "rule", "rule": "grim_trigger", "agents": [2, 3]},
        ]
    )
    outcome, ctx = run_world(doc)
    # Agent 0 cooperates once, then defects; agents 2 and 3 cooperate throughout.
    assert outcome.distributions["choice"] == {"cooperate": 1 + 8, "defect": 4 + 3}
    assert outcome.metrics["mutualCooperationRate"] == pytest.approx(4 / 8)
    assert ctx.counters["ruleDecisions"] == 16
    assert ctx.counters["substitutedDecisions"] == 0


def test_pd_lost_decisions_keep_the_previous_move_and_are_counted() -> None:
    outcome, ctx = run_world(pd_doc(), provider=GarbageProvider(LLMConfig()))
    # Nobody has a move yet, so the fallback opens with cooperate and keeps it.
    assert outcome.distributions["choice"] == {"cooperate": 16, "defect": 0}
    assert ctx.counters["substitutedDecisions"] == 16
    assert ctx.lost_decisions == 16


def test_pd_inactive_agents_repeat_their_move() -> None:
    doc = pd_doc(policy={"name": "round_robin", "options": {"perStep": 2}}, steps=2)
    doc["executors"] = [
        {"kind": "rule", "rule": "constant", "options": {"params": {"option": "defect"}}}
    ]
    outcome, ctx = run_world(doc)
    # Round 0: agents 0, 1 defect; 2, 3 idle and open with cooperate. Round 1: 2, 3 defect;
    # 0, 1 idle and repeat defect.
    assert outcome.distributions["choice"] == {"cooperate": 2, "defect": 6}
    assert ctx.counters["inactiveMoves"] == 4


def test_pd_runs_with_the_offline_provider_and_is_deterministic() -> None:
    doc = pd_doc(params={"framing": "moralised", "matching": "random", "memoryWindow": 2})
    first, ctx = run_world(doc)
    second, _ = run_world(doc)
    assert first == second
    assert set(first.metrics) == {"cooperationRate", "mutualCooperationRate", "averagePayoff"}
    assert sum(first.distributions["choice"].values()) == 16
    assert ctx.counters["llmCalls"] == 16


def test_pd_framing_moves_the_offline_stand_in() -> None:
    rates = {
        framing: run_world(pd_doc(population={"n": 20}, params={"framing": framing}))[0].metrics[
            "cooperationRate"
        ]
        for framing in ("moralised", "risk")
    }
    assert rates["moralised"] > rates["risk"]


# --------------------------------------------------------------------------- echo chamber


def test_echo_params_defaults() -> None:
    doc = EchoChamberParams.model_validate({}).to_doc()
    assert doc["homophily"] == 0.8
    assert doc["degree"] == 8
    assert doc["feedSize"] == 5
    assert doc["recommender"] == "random"
    assert doc["memoryWindow"] == 3
    assert doc["intervention"] is None
    filled = EchoChamberParams.model_validate({"intervention": {}}).to_doc()["intervention"]
    assert filled == {"timing": 0, "dose": 0.1, "selection": "random", "message": "balanced"}


@pytest.mark.parametrize(
    "params",
    [
        {"homophily": 1.5},
        {"homophily": -0.1},
        {"degree": 0},
        {"feedSize": 0},
        {"recommender": "chronological"},
        {"intervention": {"dose": 1.2}},
        {"intervention": {"selection": "hubs"}},
        {"intervention": {"timing": 2, "strength": 1}},
        {"feed_size": 3},
        {"network": "small-world"},
    ],
)
def test_echo_params_reject_unknown_or_invalid_keys(params: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        EchoChamberParams.model_validate(params)


def test_echo_cross_field_checks() -> None:
    base: dict[str, Any] = {"world": "echo_chamber", "steps": 5, "population": {"n": 10}}
    assert problems(base) == []
    assert [p for p, _ in problems({**base, "params": {"degree": 10}})] == ["params.degree"]
    late = {**base, "params": {"intervention": {"timing": 5}}}
    assert [p for p, _ in problems(late)] == ["params.intervention.timing"]
    bad_stance = {**base, "population": {"n": 10, "fields": {"stance": ["support", "maybe"]}}}
    assert [p for p, _ in problems(bad_stance)] == ["population.fields.stance"]
    good_stance = {**base, "population": {"n": 10, "fields": {"stance": ["Support", -2, 1.4]}}}
    assert problems(good_stance) == []
    assert [p for p, _ in problems({**base, "population": {"n": 9}})] == ["population.n"]


def test_parse_answer_maps_every_stance_to_itself() -> None:
    for option in STANCES:
        assert parse_answer(option, STANCES) == option
        assert parse_answer(option.upper() + ".", STANCES) == option
        assert parse_answer(f"I {option} it.", STANCES) == option
        assert parse_answer(f'{{"answer": "{option}"}}', STANCES) == option
    assert parse_answer("support or oppose", STANCES) is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [("strongly oppose", -2), ("Neutral", 0), (" support ", 1), (2, 2), (7, 2), (-0.6, -1)],
)
def test_stance_value(value: Any, expected: int) -> None:
    assert stance_value(value) == expected


@pytest.mark.parametrize("value", ["maybe", True, None])
def test_stance_value_rejects_other_values(value: Any) -> None:
    with pytest.raises(ValueError):
        stance_value(value)


def test_groups_from_persona_field_or_stance_sign() -> None:
    rng = np.random.default_rng(0)
    personas: Sequence[dict[str, Any]] = [{"group": g} for g in ("b", "a", "b", "c")]
    assert assign_groups(personas, np.zeros(4, dtype=np.int64), rng).tolist() == [1, 0, 1, 2]
    stances = np.array([-2, -1, 1, 2, 0, 0, 0, 0], dtype=np.int64)
    groups = assign_groups([{}] * 8, stances, rng)
    assert groups[:4].tolist() == [0, 0, 1, 1]
    assert set(groups[4:].tolist()) <= {0, 1}


def _two_groups(n: int) -> np.ndarray[Any, np.dtype[np.int64]]:
    return (np.arange(n) % 2).astype(np.int64)


def test_network_has_exactly_degree_distinct_other_followees() -> None:
    groups = _two_groups(60)
    followees = build_network(groups, 8, 0.7, np.random.default_rng(1))
    assert followees.shape == (60, 8)
    for i, row in enumerate(followees.tolist()):
        assert len(set(row)) == 8
        assert i not in row


def test_homophily_raises_the_within_group_share() -> None:
    groups = _two_groups(400)
    shares = [
        within_group_share(build_network(groups, 8, h, np.random.default_rng(2)), groups)
        for h in (0.0, 0.2, 0.5, 0.9, 1.0)
    ]
    assert shares[0] == 0.0
    assert shares[-1] == 1.0
    assert shares == sorted(shares)
    assert shares[1] == pytest.approx(0.2, abs=0.03)
    assert shares[3] == pytest.approx(0.9, abs=0.03)


def test_network_fills_from_the_other_side_when_a_group_is_too_small() -> None:
    groups = np.array([0, 0, 0] + [1] * 17, dtype=np.int64)
    followees = build_network(groups, 8, 1.0, np.random.default_rng(0))
    for i in range(3):
        assert len(set(followees[i].tolist())) == 8
        assert {0, 1, 2} - {i} <= set(followees[i].tolist())


def test_network_is_deterministic_from_the_generator() -> None:
    groups = _two_groups(50)
    a = build_network(groups, 6, 0.8, np.random.default_rng(9))
    b = build_network(groups, 6, 0.8, np.random.default_rng(9))
    assert (a == b).all()


def test_feed_draws_distinct_followees() -> None:
    rng = np.random.default_rng(4)
    followees = build_network(_two_groups(30), 8, 0.5, rng)
    stances = rng.integers(-2, 3, size=30).astype(np.int64)
    for recommender in ("random", "engagement"):
        feeds = select_feed(followees, stances, stances, 5, recommender, rng)
        assert feeds.shape == (30, 5)
        for row, follows in zip(feeds.tolist(), followees.tolist(), strict=True):
            assert len(set(row)) == 5
            assert set(row) <= set(follows)
    assert select_feed(followees, stances, stances, 20, "random", rng).shape == (30, 8)


def test_engagement_recommender_favours_like_minded_posts() -> None:
    rng = np.random.default_rng(5)
    n = 400
    followees = build_network(_two_groups(n), 10, 0.5, rng)
    stances = rng.integers(-2, 3, size=n).astype(np.int64)

    def distance(recommender: str) -> float:
        feeds = select_feed(followees, stances, stances, 3, recommender, rng)
        return float(np.abs(stances[feeds] - stances[:, None]).mean())

    assert distance("engagement") < distance("random") - 0.3


def test_polarization_and_extreme_share() -> None:
    assert polarization(np.zeros(10, dtype=np.int64)) == 0.0
    assert polarization(np.array([-2, 2] * 5, dtype=np.int64)) == pytest.approx(1.0)
    assert polarization(np.array([-1, 1], dtype=np.int64)) == pytest.approx(0.25)
    assert extreme_share(np.array([-2, -1, 0, 1, 2], dtype=np.int64)) == pytest.approx(0.4)


def test_assortativity_on_hand_made_ties() -> None:
    stances = np.array([-2, -2, 2, 2], dtype=np.int64)
    like = np.array([[0, 1], [2, 3]])
    unlike = np.array([[0, 2], [1, 3]])
    assert assortativity(like, stances) == pytest.approx(1.0)
    assert assortativity(unlike, stances) == pytest.approx(-1.0)
    assert np.isnan(assortativity(like, np.zeros(4, dtype=np.int64)))
    # Direction does not matter.
    assert assortativity(np.array([[0, 2], [1, 0]]), stances) == assortativity(
        np.array([[2, 0], [0, 1]]), stances
    )


def test_follow_edges_and_echo_metrics() -> None:
    followees = np.array([[1], [0], [3], [2]])
    edges = follow_edges(followees)
    assert edges.tolist() == [[0, 1], [1, 0], [2, 3], [3, 2]]
    stances = np.array([-2, -1, 1, 2], dtype=np.int64)
    metrics = echo_metrics(stances, edges, same_group_posts=3, feed_posts=4)
    assert metrics["sameGroupExposure"] == 0.75
    assert metrics["meanStance"] == 0.0
    assert metrics["extremeShare"] == 0.5
    assert metrics["polarization"] == pytest.approx(2.5 / 4)
    # Ties (-2, -1) and (1, 2), read both ways: Pearson r = 0.8.
    assert metrics["stanceAssortativity"] == pytest.approx(0.8)
    assert np.isnan(echo_metrics(stances, edges, 0, 0)["sameGroupExposure"])


def test_treated_agents_follow_the_selection_rule() -> None:
    rng = np.random.default_rng(0)
    stances = np.array([0, 2, 0, -2, 1, 0], dtype=np.int64)
    groups = np.array([0, 0, 0, 1, 1, 1], dtype=np.int64)
    followees = np.array([[1, 2], [0, 2], [0, 1], [4, 5], [3, 5], [0, 1]])
    assert choose_treated("extremes", 2, stances, groups, followees, rng).tolist() == [1, 3]
    # Agent 5 follows only the other group; agents 0 and 1 are each followed by it.
    bridges = choose_treated("bridges", 1, stances, groups, followees, rng)
    assert bridges.tolist() == [5]
    random = choose_treated("random", 4, stances, groups, followees, rng)
    assert len(set(random.tolist())) == 4


def echo_doc(**over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"world": "echo_chamber", "steps": 4, "seed": 3}
    doc["population"] = {"n": 40}
    doc["params"] = {"degree": 6, "feedSize": 3}
    doc.update(over)
    return doc


def test_echo_runs_with_the_offline_provider_and_is_deterministic() -> None:
    doc = echo_doc(
        params={
            "degree": 6,
            "recommender": "engagement",
            "framing": "risk",
            "intervention": {
                "timing": 1,
                "dose": 0.25,
                "selection": "bridges",
                "message": "counter",
            },
        }
    )
    first, ctx = run_world(doc)
    second, _ = run_world(doc)
    assert first == second
    assert set(first.metrics) == set(WORLDS.get("echo_chamber").metrics)
    assert list(first.distributions["finalStance"]) == list(STANCES)
    assert sum(first.distributions["finalStance"].values()) == 40
    assert ctx.counters["treatedAgents"] == 10
    assert ctx.counters["interventionMessages"] == 10 * 3
    assert ctx.counters["feedPosts"] == 40 * 4 * 5
    assert 0 <= first.metrics["sameGroupExposure"] <= 1


def test_echo_keeps_persona_stances_when_decisions_are_lost() -> None:
    fields = {"stance": {"values": ["strongly oppose", "support"], "weights": [1, 1]}}
    doc = echo_doc(population={"n": 20, "fields": fields})
    outcome, ctx = run_world(doc, provider=GarbageProvider(LLMConfig()))
    final = outcome.distributions["finalStance"]
    assert final["strongly oppose"] + final["support"] == 20
    assert ctx.counters["substitutedDecisions"] == 20 * 4
    assert ctx.lost_decisions == 20 * 4


def test_echo_rule_keep_holds_stances_and_inactive_agents_read_nothing() -> None:
    doc = echo_doc(
        executors=[{"kind": "rule", "rule": "keep"}],
        policy={"name": "round_robin", "options": {"perStep": 10}},
    )
    outcome, ctx = run_world(doc)
    assert ctx.counters["inactiveTurns"] == 30 * 4
    assert ctx.counters["feedPosts"] == 10 * 4 * 3
    again, _ = run_world(echo_doc(executors=[{"kind": "rule", "rule": "keep"}], steps=1))
    assert outcome.distributions == again.distributions


def test_a_world_is_loaded_the_first_time_it_is_asked_for() -> None:
    """Every process that checks a plan or runs one world (each Snakemake start, each run
    process) must not load the others: the testbed worlds bring jsonschema models, CEL and
    the agent adapters."""
    code = (
        "import sys\n"
        "from simreport.kernel.worlds import WORLDS\n"
        "from simreport.harness import conditions\n"
        "testbed = 'simreport.kernel.worlds.testbed'\n"
        "names = ['echo_chamber', 'prisoners_dilemma', 'refund_desk', 'testbed']\n"
        "assert WORLDS.names() == names and 'testbed' in WORLDS\n"
        "assert WORLDS.get('prisoners_dilemma').name == 'prisoners_dilemma'\n"
        "assert testbed not in sys.modules\n"
        "assert WORLDS.get('testbed').name == 'testbed' and testbed in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    with pytest.raises(InputError) as unknown:
        WORLDS.get("no_such_world", path="world")
    assert unknown.value.path == "world" and "testbed" in str(unknown.value.expected)
