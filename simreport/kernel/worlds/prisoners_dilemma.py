"""The iterated prisoner's dilemma: agents in pairs choose to cooperate or defect each round.

Metrics are shares of moves and pair-rounds plus the mean payoff; `choice` counts every move played.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt
from pydantic import Field, model_validator

from ...core.schema import Model, Scenario, WorldParams
from ...core.values import Int64, Number
from ..world import DecisionRequest, World, WorldOutcome
from . import WORLDS

if TYPE_CHECKING:
    from ..context import RunContext

COOPERATE, DEFECT = "cooperate", "defect"
OPTIONS = (COOPERATE, DEFECT)
Framing = Literal["neutral", "moralised", "risk"]

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]


class Payoffs(Model):
    """Points per round for each outcome of one pair."""

    temptation: Number = Field(5.0, description="T: you defect while your partner cooperates.")
    reward: Number = Field(3.0, description="R: both cooperate.")
    punishment: Number = Field(1.0, description="P: both defect.")
    sucker: Number = Field(0.0, description="S: you cooperate while your partner defects.")

    @model_validator(mode="after")
    def _is_a_dilemma(self) -> Payoffs:
        t, r, p, s = self.temptation, self.reward, self.punishment, self.sucker
        if not t > r > p > s:
            raise ValueError(
                f"payoffs must satisfy temptation > reward > punishment > sucker; got {t}, {r}, "
                f"{p}, {s}"
            )
        # Otherwise taking turns at exploiting each other beats steady cooperation.
        if not 2 * r > t + s:
            raise ValueError(
                f"payoffs must satisfy 2 × reward > temptation + sucker; got {r}, {t}, {s}"
            )
        return self


class PrisonersDilemmaParams(WorldParams):
    """Parameters of the iterated prisoner's dilemma."""

    framing: Framing = Field(
        "neutral",
        description=(
            "Wording of the situation: neutral (plain), moralised (fairness and trust) or risk "
            "(being exploited, losses)."
        ),
    )
    memory_window: Int64 = Field(
        5, ge=0, description="How many of its past rounds an agent remembers (0 = none)."
    )
    payoffs: Payoffs = Field(default_factory=Payoffs, description="Points per outcome.")
    matching: Literal["fixed", "random"] = Field(
        "fixed",
        description="fixed: pairs (0,1), (2,3), … all game long; random: new pairs each round.",
    )


# The framing sentence sits in the situation, not the instructions, so it survives an executor
# that leaves the instructions component out.
FRAMING_LEAD: dict[str, str] = {
    "neutral": "You and your partner each choose a move for this round.",
    "moralised": (
        "Cooperating is the fair way to treat a partner who trusts you: together you both do well. "
        "Defecting takes advantage of that trust and harms your partner. Think about doing right "
        "by your partner."
    ),
    "risk": (
        "Cooperating carries a risk: if your partner defects, you are exploited and take the "
        "biggest loss of the game. Defecting protects you from that loss and from being exploited."
    ),
}

GOALS = "Earn as many points as you can over the whole game."


def _number(x: float) -> float | int:
    """Whole payoffs stay integers in memory records, so JSON memory reads `3`, not `3.0`."""
    return int(x) if float(x).is_integer() else x


def _points(x: float) -> str:
    text = f"{x:g}"
    return f"{text} point" if text == "1" else f"{text} points"


def pd_instructions(payoffs: Payoffs) -> str:
    """The rules of the game, the same under every framing."""
    return (
        "You play a repeated game with a partner. Each round you both choose, at the same time, to "
        f"cooperate or to defect. If you both cooperate, you each earn {_points(payoffs.reward)}. "
        f"If you both defect, you each earn {_points(payoffs.punishment)}. If one defects while "
        f"the other cooperates, the one who defects earns {_points(payoffs.temptation)} and the "
        f"one who cooperates earns {_points(payoffs.sucker)}. Choose your move for this round."
    )


def pd_payoffs(own: BoolArray, partner: BoolArray, payoffs: Payoffs) -> FloatArray:
    """Each player's points given its own and its partner's move (True = cooperate)."""
    return np.where(
        own,
        np.where(partner, payoffs.reward, payoffs.sucker),
        np.where(partner, payoffs.temptation, payoffs.punishment),
    ).astype(np.float64)


def pd_metrics(moves: BoolArray, partners: IntArray, payoffs: Payoffs) -> dict[str, float]:
    """Metrics of a finished game.

    `moves[r, i]` is True when agent i cooperated in round r; `partners[r, i]` is its partner then.
    cooperationRate is the share of cooperate moves, mutualCooperationRate the share of pair-rounds
    in which both cooperated, averagePayoff the mean points per agent per round.
    """
    if moves.size == 0:
        nan = float("nan")
        return {"cooperationRate": nan, "mutualCooperationRate": nan, "averagePayoff": nan}
    partner_moves = np.take_along_axis(moves, partners, axis=1)
    points = pd_payoffs(moves, partner_moves, payoffs)
    # Each pair appears twice (once from each side); keep the side with the lower index.
    first_of_pair = np.arange(moves.shape[1])[None, :] < partners
    mutual = (moves & partner_moves)[first_of_pair]
    return {
        "cooperationRate": float(moves.mean()),
        "mutualCooperationRate": float(mutual.mean()),
        "averagePayoff": float(points.mean()),
    }


def pairings(n: int, matching: str, rng: np.random.Generator) -> IntArray:
    """partner[i] for one round: fixed neighbours (0,1), (2,3), … or a random perfect matching."""
    order = np.arange(n) if matching == "fixed" else rng.permutation(n)
    partner = np.empty(n, dtype=np.int64)
    partner[order[0::2]] = order[1::2]
    partner[order[1::2]] = order[0::2]
    return partner


def _label(move: int) -> str | None:
    return None if move < 0 else (COOPERATE if move == 1 else DEFECT)


@WORLDS.register("prisoners_dilemma")
class PrisonersDilemma(World):
    """Iterated prisoner's dilemma; one step is one round.

    An agent that is not activated in a round plays its previous move again, and cooperates if it
    has none yet (the opening of tit-for-tat); these moves are played and scored like any other and
    counted as `inactiveMoves`. An activated agent whose decision is lost (no valid answer) gets the
    same fallback, counted as `substitutedDecisions`.
    """

    name = "prisoners_dilemma"
    Params = PrisonersDilemmaParams
    metrics = MappingProxyType(
        {
            "cooperationRate": "Share of all moves that were cooperate (0–1).",
            "mutualCooperationRate": "Share of pair-rounds in which both cooperated (0–1).",
            "averagePayoff": "Mean points per agent per round.",
        }
    )
    distributions = MappingProxyType({"choice": "Every move played: cooperate or defect."})
    min_agents = 2

    def __init__(self, ctx: RunContext, params: PrisonersDilemmaParams) -> None:
        super().__init__(ctx, params)
        self.params: PrisonersDilemmaParams = params

    @classmethod
    def check(cls, scenario: Scenario, params: Any) -> list[tuple[str, str]]:
        problems = super().check(scenario, params)
        if scenario.population.n % 2:
            problems.append(
                ("population.n", "prisoners_dilemma pairs agents, so it needs an even number")
            )
        return problems

    def run(self) -> WorldOutcome:
        ctx, params = self.ctx, self.params
        n, rounds = len(ctx.agents), ctx.scenario.steps
        payoffs = params.payoffs
        lead = FRAMING_LEAD[params.framing]
        instructions = pd_instructions(payoffs)
        # -1 = no move yet, 1 = cooperate, 0 = defect.
        last = np.full(n, -1, dtype=np.int64)
        ever_defected = np.zeros(n, dtype=bool)
        score = np.zeros(n, dtype=np.float64)
        memories: list[deque[Mapping[str, Any]]] = [
            deque(maxlen=params.memory_window) for _ in range(n)
        ]
        moves = np.zeros((rounds, n), dtype=bool)
        partners = np.zeros((rounds, n), dtype=np.int64)

        for r in range(rounds):
            ctx.begin_step(r)
            partner = pairings(n, params.matching, ctx.rng)
            active = ctx.activate(r)
            items = [
                (
                    i,
                    self._request(
                        i,
                        int(partner[i]),
                        r,
                        rounds,
                        last,
                        ever_defected,
                        score,
                        memories[i],
                        lead,
                        instructions,
                    ),
                )
                for i in active
            ]
            decisions = ctx.decide_many(items) if items else []

            fallback = np.where(last < 0, 1, last)
            move = fallback.copy()
            decided = np.zeros(n, dtype=bool)
            substituted = 0
            for (i, _), decision in zip(items, decisions, strict=True):
                decided[i] = True
                if decision.option is None:
                    substituted += 1
                else:
                    move[i] = 1 if decision.option == COOPERATE else 0
            if substituted:
                ctx.count("substitutedDecisions", substituted)
            if n - len(items):
                ctx.count("inactiveMoves", n - len(items))

            coop = move == 1
            partner_coop = coop[partner]
            points = pd_payoffs(coop, partner_coop, payoffs)
            for i in range(n):
                p = int(partner[i])
                mine, theirs = _label(int(move[i])), _label(int(move[p]))
                verb = "chose to" if decided[i] else "kept your move and chose to"
                memories[i].append(
                    {
                        "round": r + 1,
                        "you": mine,
                        "partner": theirs,
                        "payoff": _number(float(points[i])),
                        "text": (
                            f"Round {r + 1}: you {verb} {mine}; your partner chose to {theirs}; "
                            f"you earned {_points(float(points[i]))}."
                        ),
                    }
                )
            moves[r] = coop
            partners[r] = partner
            score += points
            last = move
            ever_defected |= ~coop
            mutual = int((coop & partner_coop).sum()) // 2
            ctx.emit(
                "round",
                None,
                cooperate=int(coop.sum()),
                defect=int(n - coop.sum()),
                mutualCooperation=mutual,
                substituted=substituted,
            )

        cooperate = int(moves.sum())
        return WorldOutcome(
            metrics=pd_metrics(moves, partners, payoffs),
            distributions={"choice": {COOPERATE: cooperate, DEFECT: int(moves.size) - cooperate}},
        )

    def _request(
        self,
        agent: int,
        partner: int,
        r: int,
        rounds: int,
        last: IntArray,
        ever_defected: BoolArray,
        score: FloatArray,
        memory: deque[Mapping[str, Any]],
        lead: str,
        instructions: str,
    ) -> DecisionRequest:
        partner_last = _label(int(last[partner]))
        if self.params.matching == "random":
            met = "You are paired with a partner drawn at random for this round. "
            seen = (
                f"In their last round your partner chose to {partner_last}."
                if partner_last
                else "Your partner has not played before."
            )
        else:
            met = ""
            seen = (
                f"Last round your partner chose to {partner_last}."
                if partner_last
                else "You have not played with your partner before."
            )
        situation = (
            f"{lead}\n\nRound {r + 1} of {rounds}. {met}{seen} "
            f"Your score so far: {_points(float(score[agent]))}."
        )
        return DecisionRequest(
            situation=situation,
            instructions=instructions,
            options=OPTIONS,
            memory=tuple(memory),
            goals=GOALS,
            view={
                "partnerLast": partner_last,
                "partnerEverDefected": bool(ever_defected[partner]),
                "current": _label(int(last[agent])),
            },
            kind="move",
        )
