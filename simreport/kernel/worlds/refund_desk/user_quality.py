"""Quality control of the user simulator (design §四 "独立质控"), measured on one run's records and
never on the agent's success: persona consistency, reaction-rule compliance, visibility and
termination, each with what falling short does to the run, and the run's opening and path for
the analysis's diversity check. The dimensions: docs/testbed.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ....core.files import write_json
from ....core.run_digests import USER_QUALITY_FILE
from ....core.testbed_schema import (
    ReactionRule,
    UserConfig,
    UserMode,
    condition_holds_for,
    parse_condition,
)
from ...testbed.records import Observations
from .user import EFFECT_INTENT, ENDING, amounts_in, format_amount

QUALITY_FILE = USER_QUALITY_FILE
CHECKS = ("personaConsistency", "reactionCompliance", "visibility", "termination")

BUILTIN_STYLE: Mapping[str, Mapping[str, tuple[str, ...]]] = {
    "tone": {
        "annoyed": ("no rush", "take your time", "my pleasure", "no worries", "happy to wait"),
        "angry": ("no rush", "take your time", "my pleasure", "no worries", "happy to wait"),
        "polite": ("forget it", "ridiculous", "useless", "shut up"),
        "friendly": ("forget it", "ridiculous", "useless", "shut up"),
    },
    "expertise": {
        "novice": ("idempotent", "endpoint", "api", "http", "payload", "status code"),
    },
    "patience": {
        "low": ("no rush", "take your time", "happy to wait", "whenever you can"),
    },
}
"""Phrases that contradict a persona, by attribute and value (matched case-insensitively on word
boundaries); `user.qualityControl.styleContradictions` replaces the list of a value it names."""

# What each effect's intent may be pre-empted by: intents the simulator rightly puts first
# (a confirmed refund, giving up, a higher-priority effect, an answer to an order-number question).
_ANSWERS_REFUND = ("confirm_and_close", "point_out_wrong_amount")
# A withdrawal comes before every other effect, and once the user has withdrawn the request the
# goal is no refund: effects about the refund are pre-empted by it (the simulator asks again, or
# closes when the agent confirms the withdrawal).
_WITHDRAWS = "withdraw_request"
PRE_EMPTED_BY: Mapping[str, frozenset[str]] = {
    "give_up": frozenset({*_ANSWERS_REFUND, _WITHDRAWS}),
    "threaten_complaint": frozenset({*_ANSWERS_REFUND, "give_up", _WITHDRAWS}),
    "disclose_order_number": frozenset(
        {*_ANSWERS_REFUND, "give_up", "threaten_complaint", _WITHDRAWS}
    ),
    "ask_status": frozenset(
        {
            *_ANSWERS_REFUND,
            "give_up",
            "threaten_complaint",
            "provide_order_number",
            "withhold_order_number",
            _WITHDRAWS,
        }
    ),
}


@dataclass(frozen=True)
class NamedRule:
    """A reaction rule with the id its records carry (`policy.0`, `scenario.1`)."""

    id: str
    rule: ReactionRule


def named_rules(
    policy_rules: Sequence[ReactionRule], scenario_rules: Sequence[ReactionRule]
) -> list[NamedRule]:
    """The rules in the order the simulator checks them, with their record ids."""
    return [NamedRule(f"policy.{i}", r) for i, r in enumerate(policy_rules)] + [
        NamedRule(f"scenario.{i}", r) for i, r in enumerate(scenario_rules)
    ]


@dataclass(frozen=True)
class _Turn:
    """One user turn as the records show it."""

    turn: int
    record_id: str
    logical_ms: int
    intent: str
    text: str | None
    agent_before: tuple[Mapping[str, Any], ...]
    """The agent's messages this turn answers (those of the previous turn)."""


def _user_turns(records: Sequence[Mapping[str, Any]]) -> list[_Turn]:
    agent_by_turn: dict[int, list[Mapping[str, Any]]] = {}
    for r in records:
        if r.get("type") == "agent.message":
            agent_by_turn.setdefault(int(r["payload"].get("turn", 0)), []).append(r)
    turns: list[_Turn] = []
    for r in records:
        if r.get("type") not in ("user.message", "user.silent"):
            continue
        p = r["payload"]
        t = int(p.get("turn", 0))
        turns.append(
            _Turn(
                t,
                str(r["recordId"]),
                int(r.get("logicalMs", 0)),
                str(p.get("intent")),
                p.get("text") if r["type"] == "user.message" else None,
                tuple(agent_by_turn.get(t - 1, ())),
            )
        )
    return turns


def _signals(agent: Sequence[Mapping[str, Any]]) -> set[str]:
    return {str(s) for r in agent for s in r["payload"].get("signals", [])}


def _phrase(text: str, phrase: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(phrase)}(?!\w)", text, re.IGNORECASE) is not None


def _rate(good: int, total: int) -> float | None:
    return good / total if total else None


# --------------------------------------------------------------------------- the four checks


def persona_consistency(
    turns: Sequence[_Turn], config: UserConfig, order_pattern: str, learned: Sequence[set[int]]
) -> dict[str, Any]:
    """Per message: facts other than the persona's, and phrases that contradict its style."""
    facts = config.private_facts
    persona = config.persona.to_doc()
    overrides = config.thresholds.style_contradictions
    phrases: list[tuple[str, str]] = []
    for attribute in ("tone", "expertise", "patience"):
        value = str(persona.get(attribute))
        named = overrides.get(attribute, {})
        listed = named[value] if value in named else BUILTIN_STYLE[attribute].get(value, ())
        phrases += [(f"{attribute} {value}", phrase) for phrase in listed]
    flagged: list[dict[str, Any]] = []
    sent = [t for t in turns if t.text is not None]
    for turn, known in zip(sent, learned, strict=True):
        assert turn.text is not None
        problems: list[str] = []
        for number in re.findall(order_pattern, turn.text):
            if number != facts.order_number:
                problems.append(
                    f"fact: states order number {number}, the persona's is "
                    f"{facts.order_number or 'none'}"
                )
        belief = {facts.paid_amount_minor} if facts.paid_amount_minor is not None else set()
        for amount in amounts_in(turn.text):
            if amount not in belief | known:
                problems.append(
                    f"fact: states the amount {format_amount(amount)}, which the persona neither "
                    "paid nor was told"
                )
        for where, phrase in phrases:
            if _phrase(turn.text, phrase):
                problems.append(f"style: {phrase!r} contradicts {where}")
        if problems:
            flagged.append({"recordId": turn.record_id, "turn": turn.turn, "problems": problems})
    threshold = config.thresholds.min_persona_consistency
    rate = _rate(len(sent) - len(flagged), len(sent))
    status = "not_applicable" if rate is None else ("pass" if rate >= threshold else "review")
    return {
        "status": status,
        "messages": len(sent),
        "consistent": len(sent) - len(flagged),
        "rate": rate,
        "threshold": threshold,
        "flagged": flagged,
    }


def reaction_compliance(
    records: Sequence[Mapping[str, Any]],
    turns: Sequence[_Turn],
    rules: Sequence[NamedRule],
    threshold: float,
) -> dict[str, Any]:
    """Per trigger: when each rule should have fired (recomputed from the agent's signals and the
    logical clock), whether it fired then, and whether its effect was carried out."""
    opened = turns[0].logical_ms if turns else 0
    seen = dict.fromkeys((r.id for r in rules), 0)
    fired_at: dict[str, int] = {}
    asks = 0
    for turn in turns[1:]:
        signals = _signals(turn.agent_before)
        if "agent.asks_order_number" in signals:
            asks += 1
        values = {"wait_ms": turn.logical_ms - opened, "turns": turn.turn - 1, "agent_asks": asks}
        for named in rules:
            if named.id in fired_at:
                continue
            subject, op, number = parse_condition(named.rule.when)
            holds = (
                subject in signals
                if op is None
                else condition_holds_for(values[subject], op, number or 0)
            )
            if not holds:
                continue
            seen[named.id] += 1
            if seen[named.id] >= named.rule.times:
                fired_at[named.id] = turn.turn
    recorded: dict[str, Mapping[str, Any]] = {}
    for r in records:
        if r.get("type") == "user.reaction":
            recorded.setdefault(str(r["payload"].get("rule")), r)
    suppressed = {
        (str(r["payload"].get("effect")), int(r["payload"].get("turn", 0)))
        for r in records
        if r.get("type") == "user.reaction.suppressed"
    }
    items: list[dict[str, Any]] = []
    effects = {named.id: named.rule.effect for named in rules}
    for rule_id in sorted(set(fired_at) | set(recorded)):
        effect = str(
            effects.get(rule_id)
            or (recorded[rule_id]["payload"].get("effect") if rule_id in recorded else "")
        )
        expected, record = fired_at.get(rule_id), recorded.get(rule_id)
        item: dict[str, Any] = {"rule": rule_id, "effect": effect, "turn": expected}
        if expected is None:
            assert record is not None
            item.update(
                turn=record["payload"].get("turn"),
                outcome="spurious",
                detail="fired although its condition did not hold",
            )
        elif record is None:
            item.update(outcome="missed", detail=f"its condition held at turn {expected}")
        elif int(record["payload"].get("turn", 0)) != expected:
            item.update(
                outcome="missed",
                detail=f"fired at turn {record['payload'].get('turn')}, due at turn {expected}",
            )
        else:
            item.update(_carried_out(effect, expected, turns, suppressed))
        items.append(item)
    counted = [i for i in items if i["outcome"] != "open"]
    good = sum(1 for i in counted if i["outcome"] in ("carried_out", "suppressed", "pre_empted"))
    rate = _rate(good, len(counted))
    status = "not_applicable" if rate is None else ("pass" if rate >= threshold else "fail")
    return {
        "status": status,
        "triggers": len(counted),
        "compliant": good,
        "rate": rate,
        "threshold": threshold,
        "items": items,
    }


def _carried_out(
    effect: str, fired: int, turns: Sequence[_Turn], suppressed: set[tuple[str, int]]
) -> dict[str, str]:
    target = EFFECT_INTENT.get(effect, effect)
    allowed = PRE_EMPTED_BY.get(effect, frozenset())
    later = [t for t in turns if t.turn >= fired]
    for turn in later:
        if turn.intent == target:
            return {"outcome": "carried_out", "detail": f"{target} at turn {turn.turn}"}
        if (effect, turn.turn) in suppressed:
            return {
                "outcome": "suppressed",
                "detail": f"by the disclosure rule at turn {turn.turn}",
            }
        if turn.intent not in allowed:
            return {
                "outcome": "not_carried_out",
                "detail": f"turn {turn.turn} said {turn.intent} while {target} was due",
            }
        if turn.intent in ENDING:
            return {
                "outcome": "pre_empted",
                "detail": f"{turn.intent} at turn {turn.turn} came first",
            }
    return {"outcome": "open", "detail": "the conversation stopped before it was due"}


def visibility(
    turns: Sequence[_Turn], config: UserConfig, order_pattern: str, learned: Sequence[set[int]]
) -> dict[str, Any]:
    """Per disclosure: each private fact a message states, against the disclosure rules, and
    every fact stated that the user cannot know."""
    facts = config.private_facts
    rules = {
        "orderNumber": config.disclosure.order_number,
        "paidAmount": config.disclosure.paid_amount,
    }
    disclosed: set[str] = set()
    asked = False
    told_orders: set[str] = set()
    disclosures = 0
    violations: list[dict[str, Any]] = []
    sent = [t for t in turns if t.text is not None]
    for turn, known in zip(sent, learned, strict=True):
        assert turn.text is not None
        if "agent.asks_order_number" in _signals(turn.agent_before):
            asked = True
        for r in turn.agent_before:
            told_orders.update(re.findall(order_pattern, str(r["payload"].get("text", ""))))
        stated: list[tuple[str, str]] = []
        for number in re.findall(order_pattern, turn.text):
            if number == facts.order_number:
                stated.append(("orderNumber", number))
            elif number not in told_orders:
                violations.append(
                    _violation(turn, f"states order number {number}, outside the user's knowledge")
                )
                disclosures += 1
        for amount in amounts_in(turn.text):
            if amount in known:
                continue  # the agent said it first
            if amount == facts.paid_amount_minor:
                stated.append(("paidAmount", format_amount(amount)))
            else:
                violations.append(
                    _violation(
                        turn,
                        f"states the amount {format_amount(amount)}, outside the user's knowledge",
                    )
                )
                disclosures += 1
        for fact, value in stated:
            disclosures += 1
            rule = rules[fact]
            allowed = (
                rule == "upfront"
                or fact in disclosed
                or (rule == "on-request" and fact == "orderNumber" and asked)
            )
            if not allowed:
                why = "never" if rule == "never" else "on-request, and nobody asked"
                violations.append(_violation(turn, f"discloses {fact} {value}: the rule is {why}"))
            disclosed.add(fact)
    threshold = config.thresholds.max_visibility_violations
    status = (
        "not_applicable"
        if not disclosures
        else ("pass" if len(violations) <= threshold else "fail")
    )
    return {
        "status": status,
        "disclosures": disclosures,
        "violations": violations,
        "threshold": threshold,
    }


def _violation(turn: _Turn, problem: str) -> dict[str, Any]:
    return {"recordId": turn.record_id, "turn": turn.turn, "problem": problem}


def termination(
    records: Sequence[Mapping[str, Any]],
    turns: Sequence[_Turn],
    config: UserConfig,
    give_up_ms: int,
) -> dict[str, Any]:
    """Per run: at every turn, whether the user stopped or went on as the rules say."""
    closed = [r for r in records if r.get("type") == "conversation.closed"]
    if not closed or not turns:
        return {
            "status": "not_applicable",
            "closedBy": None,
            "problems": [],
            "detail": "the conversation did not close (the harness stopped it)",
        }
    closed_by = closed[-1]["payload"].get("closedBy")
    gave_up_rule = {
        int(r["payload"].get("turn", 0))
        for r in records
        if r.get("type") == "user.reaction" and r["payload"].get("effect") == "give_up"
    }
    withdraw_fired = min(
        (
            int(r["payload"].get("turn", 0))
            for r in records
            if r.get("type") == "user.reaction" and r["payload"].get("effect") == _WITHDRAWS
        ),
        default=None,
    )
    belief = config.private_facts.paid_amount_minor
    opened = turns[0].logical_ms
    problems: list[str] = []
    reason = None
    withdrawn = False
    for turn in turns[1:]:
        confirming = [
            r
            for r in turn.agent_before
            if "agent.confirms_refund" in r["payload"].get("signals", [])
        ]
        claimed = set(amounts_in(" ".join(str(r["payload"].get("text", "")) for r in confirming)))
        waited = turn.logical_ms - opened
        gave_up = any(t <= turn.turn for t in gave_up_rule)
        due: str | None
        if withdrawn:
            # The goal is now that no refund stands: the user closes once the agent confirms the
            # withdrawal, gives up as before, and otherwise asks again.
            if "agent.confirms_withdrawal" in _signals(turn.agent_before):
                due, why = "confirm_and_close", "the agent confirmed the withdrawal"
            elif waited > give_up_ms or gave_up:
                due, why = "give_up", _give_up_why(gave_up, waited, give_up_ms)
            else:
                due, why = None, ""
        elif withdraw_fired is not None and turn.turn >= withdraw_fired:
            due, why = _WITHDRAWS, "a withdraw rule fired"
        elif confirming and (belief is None or not claimed or belief in claimed):
            due, why = "confirm_and_close", "the agent confirmed the refund"
        elif confirming:
            due, why = "point_out_wrong_amount", "the agent confirmed a wrong amount"
        elif waited > give_up_ms or gave_up:
            due, why = "give_up", _give_up_why(gave_up, waited, give_up_ms)
        else:
            due, why = None, ""
        withdrawn = withdrawn or turn.intent == _WITHDRAWS
        if turn.text is None:
            problems.append(
                f"turn {turn.turn}: the user fell silent (no wording passed the checks)"
            )
        elif due is not None and turn.intent != due:
            problems.append(f"turn {turn.turn}: said {turn.intent} where {why} ({due} due)")
        elif due is None and turn.intent in ENDING:
            problems.append(
                f"turn {turn.turn}: said {turn.intent} with no reason the rules give to stop"
            )
        elif turn.intent in ENDING:
            reason = why
    if turns[0].text is None:
        problems.append("turn 1: the user fell silent (no wording passed the checks)")
    return {
        "status": "fail" if problems else "pass",
        "closedBy": closed_by,
        "problems": problems,
        "detail": reason or (f"closed by {closed_by}" if not problems else problems[0]),
    }


def _give_up_why(rule: bool, waited: int, give_up_ms: int) -> str:
    if rule:
        return "a give-up rule fired"
    return f"patience ran out ({waited} ms waited > {give_up_ms} ms)"


# --------------------------------------------------------------------------- one run


def _learned(turns: Sequence[_Turn]) -> list[set[int]]:
    """Per sent message: the amounts the agent had written before it."""
    out: list[set[int]] = []
    known: set[int] = set()
    for turn in turns:
        for r in turn.agent_before:
            known.update(amounts_in(str(r["payload"].get("text", ""))))
        if turn.text is not None:
            out.append(set(known))
    return out


def assess_run(
    records: Sequence[Mapping[str, Any]],
    config: UserConfig,
    *,
    rules: Sequence[NamedRule],
    give_up_ms: int,
    order_pattern: str,
    mode: UserMode,
) -> dict[str, Any]:
    """The quality-control document of one run (user-quality.json): each check with its unit,
    threshold and items, the run's opening and path, which checks failed, the problems stated
    as the run's validity problems, and what they do to the run (`disposition`)."""
    turns = _user_turns(records)
    learned = _learned(turns)
    qc = config.thresholds
    checks = {
        "personaConsistency": persona_consistency(turns, config, order_pattern, learned),
        "reactionCompliance": reaction_compliance(
            records, turns, rules, qc.min_reaction_compliance
        ),
        "visibility": visibility(turns, config, order_pattern, learned),
        "termination": termination(records, turns, config, give_up_ms),
    }
    failed = [k for k in CHECKS if checks[k]["status"] in ("fail", "review")]
    violating: list[str] = []
    unchecked: list[str] = []
    review: list[str] = []
    persona = checks["personaConsistency"]
    if persona["status"] == "review":
        review.append(
            f"persona consistency {persona['rate']:.2f} below {persona['threshold']:.2f}: "
            + "; ".join(
                f"turn {m['turn']} ({', '.join(m['problems'])})" for m in persona["flagged"]
            )
        )
    reaction = checks["reactionCompliance"]
    if reaction["status"] == "fail":
        violating.append(
            f"reaction-rule compliance {reaction['rate']:.2f} below {reaction['threshold']:.2f}: "
            + "; ".join(
                f"rule {i['rule']} ({i['effect']}) {i['outcome'].replace('_', ' ')}: {i['detail']}"
                for i in reaction["items"]
                if i["outcome"] not in ("carried_out", "suppressed", "pre_empted", "open")
            )
        )
    seen = checks["visibility"]
    if seen["status"] == "fail":
        violating.append(
            f"{len(seen['violations'])} visibility violation(s), at most {seen['threshold']}: "
            + "; ".join(f"turn {v['turn']} {v['problem']}" for v in seen["violations"])
        )
    ended = checks["termination"]
    if ended["status"] == "fail":
        (unchecked if qc.termination == "enforce" else review).append(
            "termination not as the rules say: " + "; ".join(ended["problems"])
        )
    validity = "violated" if violating else ("unchecked" if unchecked else None)
    return {
        "mode": mode,
        "thresholds": qc.to_doc(),
        "checks": checks,
        "opening": turns[0].text if turns else None,
        "path": [t.intent if t.text is not None else "silent" for t in turns],
        "failed": failed,
        "problems": [f"user simulator QC: {p}" for p in violating + unchecked + review],
        "disposition": {
            "validity": validity,
            "violating": violating,
            "unchecked": unchecked,
            "review": review,
        },
    }


QUALITY_OBSERVATIONS = {
    "user.qc.persona_consistency": ("personaConsistency", "rate"),
    "user.qc.reaction_compliance": ("reactionCompliance", "rate"),
    "user.qc.visibility_violations": ("visibility", "violations"),
    "user.qc.termination": ("termination", "status"),
}


def add_quality_observations(
    obs: Observations, doc: Mapping[str, Any], records: Sequence[Mapping[str, Any]]
) -> None:
    """The checks' results as observations, derived from the user's messages and reactions."""
    sources = [
        str(r["recordId"])
        for r in records
        if r.get("type")
        in ("user.message", "user.silent", "user.reaction", "user.reaction.suppressed")
        or r.get("type") == "conversation.closed"
    ]
    for key, (check, field) in QUALITY_OBSERVATIONS.items():
        value = doc["checks"][check][field]
        if field == "violations":
            value = len(value)
        obs.add(key, value, sources)
    obs.add("user.qc.failed", list(doc["failed"]), sources)


def write_quality(run_dir: Path | None, doc: Mapping[str, Any]) -> None:
    if run_dir is not None:
        write_json(run_dir / QUALITY_FILE, dict(doc))
