"""Opinion dynamics on a follow network: agents read a recommended feed and restate their stance.

Stances sit on a five-point scale (−2 … +2); the network's homophily, the recommender and an
optional intervention shape what each agent reads.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt
from pydantic import Field

from ...core.errors import RunError
from ...core.schema import CategoricalField, ConstantField, Model, Scenario, WorldParams
from ...core.values import Int64, Number
from ..world import DecisionRequest, World, WorldOutcome
from . import WORLDS

if TYPE_CHECKING:
    from ..context import RunContext

# Index k of a stance label is stance value k − 2.
STANCES = ("strongly oppose", "oppose", "neutral", "support", "strongly support")
STANCE_INDEX = {label: k for k, label in enumerate(STANCES)}
NEUTRAL = 2
Framing = Literal["neutral", "moralised", "risk"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

DEFAULT_TOPIC = "a congestion charge for cars entering the city centre"


class Intervention(Model):
    """A treatment: from `timing` on, a share of agents get an extra, cross-cutting item in their
    feed."""

    timing: Int64 = Field(
        0, ge=0, description="Step at which the treatment starts (0 = the first)."
    )
    dose: Number = Field(0.1, ge=0, le=1, description="Share of agents treated (0–1).")
    selection: Literal["random", "bridges", "extremes"] = Field(
        "random",
        description=(
            "Who is treated: random agents, bridges (the largest share of ties across groups) or "
            "extremes (the strongest stances when the treatment starts)."
        ),
    )
    message: Literal["balanced", "counter"] = Field(
        "balanced",
        description=(
            "balanced: a summary of both sides; counter: a post from the opposite side of the "
            "reader's current stance (a balanced summary for neutral readers)."
        ),
    )


class EchoChamberParams(WorldParams):
    """Parameters of the echo-chamber world."""

    topic: str = Field(
        DEFAULT_TOPIC, min_length=1, description="The proposal under discussion, as a noun phrase."
    )
    framing: Framing = Field(
        "neutral",
        description="Wording of the topic and posts: neutral, moralised (fairness, harm) or risk.",
    )
    memory_window: Int64 = Field(
        3,
        ge=0,
        description="How many of its past steps (feed read, stance given) an agent recalls.",
    )
    homophily: Number = Field(
        0.8, ge=0, le=1, description="Probability that a follow tie goes to the agent's own group."
    )
    degree: Int64 = Field(8, ge=1, description="How many other agents each agent follows.")
    feed_size: Int64 = Field(5, ge=1, description="Posts an agent reads per step.")
    recommender: Literal["random", "engagement"] = Field(
        "random",
        description=(
            "How feed posts are picked among followed agents: random (uniform) or engagement "
            "(weight exp(−|stance difference|), favouring like-minded posts)."
        ),
    )
    intervention: Intervention | None = Field(None, description="A treatment, or null for none.")


# --------------------------------------------------------------------------- wording

_PHRASE = (
    "strongly oppose the proposal",
    "oppose the proposal",
    "are neutral on the proposal",
    "support the proposal",
    "strongly support the proposal",
)

_POSTS: dict[str, tuple[str, ...]] = {
    "neutral": (
        "I strongly oppose the proposal.",
        "I oppose the proposal.",
        "I am neutral on the proposal.",
        "I support the proposal.",
        "I strongly support the proposal.",
    ),
    "moralised": (
        "I strongly oppose the proposal: it is unfair and it harms people.",
        "I oppose the proposal: it does not seem fair to me.",
        "I am neutral on the proposal: both sides make fair points.",
        "I support the proposal: it is the right thing to do.",
        "I strongly support the proposal: it is simply right and fair.",
    ),
    "risk": (
        "I strongly oppose the proposal: the risk of losses is far too high.",
        "I oppose the proposal: it looks risky to me.",
        "I am neutral on the proposal: both choices carry risk.",
        "I support the proposal: doing nothing is the bigger risk.",
        "I strongly support the proposal: without it we face real danger.",
    ),
}

_HEADER = {
    "neutral": "The proposal under discussion: {topic}.",
    "moralised": (
        "The proposal under discussion: {topic}. People see it as a moral question: whether it is "
        "fair, who it harms, and what is right for the community."
    ),
    "risk": (
        "The proposal under discussion: {topic}. People see it as a question of risk: what could "
        "be lost, who is exposed to danger, and how costly a mistake would be."
    ),
}

_BALANCED = (
    'The platform adds a balanced summary: "Some people support the proposal, some oppose it and '
    'many are neutral; each side has reasons worth hearing."'
)

INSTRUCTIONS = "Read your feed, then say where you stand on the proposal now."
GOALS = "Say honestly where you stand on the proposal."


# --------------------------------------------------------------------------- pure pieces


def stance_value(value: Any) -> int:
    """A persona's stance as −2 … +2: an option label (any case) or a number (rounded, clipped)."""
    if isinstance(value, bool):
        raise ValueError(f"stance {value!r} is neither a stance label nor a number")
    if isinstance(value, (int, float)):
        return int(np.clip(round(float(value)), -2, 2))
    if isinstance(value, str) and value.strip().lower() in STANCE_INDEX:
        return STANCE_INDEX[value.strip().lower()] - 2
    raise ValueError(f"stance {value!r} is neither a number nor one of: {', '.join(STANCES)}")


def assign_groups(
    personas: Sequence[Mapping[str, Any]], stances: IntArray, rng: np.random.Generator
) -> IntArray:
    """Group per agent: the persona field `group` when present (values in sorted order), else the
    sign of the initial stance, neutral agents split between the two sides by a coin flip."""
    if personas and "group" in personas[0]:
        values = [str(p["group"]) for p in personas]
        index = {v: g for g, v in enumerate(sorted(set(values)))}
        return np.array([index[v] for v in values], dtype=np.int64)
    coin = rng.integers(0, 2, size=len(stances))
    return np.where(stances > 0, 1, np.where(stances < 0, 0, coin)).astype(np.int64)


def build_network(
    groups: IntArray, degree: int, homophily: float, rng: np.random.Generator
) -> IntArray:
    """followees[i]: the `degree` distinct other agents agent i follows.

    Each tie goes to i's own group with probability `homophily`, else to another group; when one
    side has too few agents the rest come from the other side, so every agent follows exactly
    `degree` others.
    """
    n = len(groups)
    if not 1 <= degree <= n - 1:
        raise ValueError(f"degree must be between 1 and n - 1 = {n - 1}; got {degree}")
    members = {int(g): np.flatnonzero(groups == g) for g in np.unique(groups)}
    outsiders = {g: np.flatnonzero(groups != g) for g in members}
    position = np.empty(n, dtype=np.int64)
    for m in members.values():
        position[m] = np.arange(len(m))
    k_within = rng.binomial(degree, homophily, size=n)
    followees = np.empty((n, degree), dtype=np.int64)
    for i in range(n):
        g = int(groups[i])
        own, other = members[g], outsiders[g]
        k_in = min(int(k_within[i]), len(own) - 1)
        k_out = degree - k_in
        if k_out > len(other):
            k_out = len(other)
            k_in = degree - k_out
        # Draw among the group minus i itself: skip i's own slot.
        picks = rng.choice(len(own) - 1, size=k_in, replace=False)
        picks += picks >= position[i]
        followees[i, :k_in] = own[picks]
        followees[i, k_in:] = other[rng.choice(len(other), size=k_out, replace=False)]
    return followees


def follow_edges(followees: IntArray) -> IntArray:
    """(follower, followee) pairs, one row per tie."""
    n, d = followees.shape
    return np.column_stack((np.repeat(np.arange(n, dtype=np.int64), d), followees.ravel()))


def within_group_share(followees: IntArray, groups: IntArray) -> float:
    """Share of follow ties that stay inside the follower's group."""
    return float((groups[followees] == groups[:, None]).mean())


def select_feed(
    followees: IntArray,
    viewer_stances: IntArray,
    stances: IntArray,
    size: int,
    recommender: str,
    rng: np.random.Generator,
) -> IntArray:
    """Feed posters for a batch of viewers: `size` distinct followees per row, drawn without
    replacement, uniformly (random) or with weight exp(−|stance difference|) (engagement)."""
    size = min(size, followees.shape[1])
    u = 1.0 - rng.random(followees.shape)  # in (0, 1], so the log below stays finite
    if recommender == "engagement":
        distance = np.abs(stances[followees] - viewer_stances[:, None])
        # Weighted sampling without replacement: the largest log(u) / w win (Efraimidis–Spirakis).
        keys = np.log(u) / np.exp(-distance.astype(np.float64))
    else:
        keys = u
    order = np.argsort(-keys, axis=1, kind="stable")[:, :size]
    return np.take_along_axis(followees, order, axis=1)


def polarization(stances: IntArray) -> float:
    """Population variance of stances (−2 … +2) over its maximum, 4: 0 is consensus, 1 is an even
    split between the two extremes."""
    if len(stances) == 0:
        return float("nan")
    return float(np.var(stances.astype(np.float64)) / 4.0)


def extreme_share(stances: IntArray) -> float:
    """Share of agents at either end of the scale."""
    if len(stances) == 0:
        return float("nan")
    return float((np.abs(stances) == 2).mean())


def assortativity(edges: IntArray, stances: IntArray) -> float:
    """Pearson correlation of the stances at the two ends of each tie, ties read both ways (so
    the direction of a follow does not matter); NaN when stances do not vary."""
    if len(edges) == 0:
        return float("nan")
    a, b = stances[edges[:, 0]], stances[edges[:, 1]]
    x = np.concatenate((a, b)).astype(np.float64)
    y = np.concatenate((b, a)).astype(np.float64)
    if np.all(x == x[0]):
        return float("nan")
    return float(np.corrcoef(x, y)[0, 1])


def echo_metrics(
    stances: IntArray, edges: IntArray, same_group_posts: int, feed_posts: int
) -> dict[str, float]:
    """The world's metrics from the final stances, the ties and the exposure tallies."""
    return {
        "polarization": polarization(stances),
        "stanceAssortativity": assortativity(edges, stances),
        "sameGroupExposure": same_group_posts / feed_posts if feed_posts else float("nan"),
        "meanStance": float(stances.mean()) if len(stances) else float("nan"),
        "extremeShare": extreme_share(stances),
    }


def choose_treated(
    selection: str,
    k: int,
    stances: IntArray,
    groups: IntArray,
    followees: IntArray,
    rng: np.random.Generator,
) -> IntArray:
    """Indices of the k treated agents; ties in the ranking are broken at random."""
    n = len(stances)
    k = min(k, n)
    if selection == "random":
        return np.sort(rng.choice(n, size=k, replace=False)).astype(np.int64)
    if selection == "extremes":
        score = np.abs(stances).astype(np.float64)
    else:  # bridges: share of an agent's ties (followed and followers) that cross groups
        cross = groups[followees] != groups[:, None]
        out_cross = cross.sum(axis=1).astype(np.float64)
        in_cross = np.bincount(followees[cross], minlength=n).astype(np.float64)
        in_all = np.bincount(followees.ravel(), minlength=n).astype(np.float64)
        score = (out_cross + in_cross) / (followees.shape[1] + in_all)
    order = np.lexsort((rng.random(n), -score))
    return np.sort(order[:k]).astype(np.int64)


# --------------------------------------------------------------------------- the world


@WORLDS.register("echo_chamber")
class EchoChamber(World):
    """Agents follow others on a homophilous network and restate their stance each step.

    Updates are synchronous: everyone reads posts written from the stances at the start of the
    step. An agent that is not activated keeps its stance and reads nothing (`inactiveTurns`).
    An activated agent whose decision is lost keeps its previous stance (`substitutedDecisions`).
    sameGroupExposure counts posts by agents only, not the intervention's messages.
    """

    name = "echo_chamber"
    Params = EchoChamberParams
    metrics = MappingProxyType(
        {
            "polarization": (
                "Variance of the final stances over its maximum: 0 consensus, 1 an even split "
                "between the extremes."
            ),
            "stanceAssortativity": "Correlation of the final stances at the two ends of each tie.",
            "sameGroupExposure": "Share of agents' posts read that came from the reader's group.",
            "meanStance": "Mean final stance, from −2 (strongly oppose) to +2 (strongly support).",
            "extremeShare": "Share of agents at either end of the scale at the end.",
        }
    )
    distributions = MappingProxyType({"finalStance": "Agents per stance label at the end."})
    min_agents = 10

    def __init__(self, ctx: RunContext, params: EchoChamberParams) -> None:
        super().__init__(ctx, params)
        self.params: EchoChamberParams = params

    @classmethod
    def check(cls, scenario: Scenario, params: Any) -> list[tuple[str, str]]:
        problems = super().check(scenario, params)
        n = scenario.population.n
        if params.degree > n - 1:
            problems.append(
                ("params.degree", f"each agent can follow at most n − 1 = {n - 1} others")
            )
        if params.intervention is not None and params.intervention.timing >= scenario.steps:
            problems.append(
                (
                    "params.intervention.timing",
                    f"the intervention starts at step {params.intervention.timing}, but the run "
                    f"has only steps 0–{scenario.steps - 1}",
                )
            )
        spec = scenario.population.fields.get("stance")
        values: list[Any] = []
        if isinstance(spec, CategoricalField):
            values = list(spec.values)
        elif isinstance(spec, ConstantField):
            values = [spec.value]
        for value in values:
            try:
                stance_value(value)
            except ValueError as exc:
                problems.append(("population.fields.stance", str(exc)))
                break
        return problems

    def run(self) -> WorldOutcome:
        ctx, params = self.ctx, self.params
        n, steps, rng = len(ctx.agents), ctx.scenario.steps, ctx.rng
        personas = [agent.persona for agent in ctx.agents]

        if personas and "stance" in personas[0]:
            try:
                stances = np.array([stance_value(p["stance"]) for p in personas], dtype=np.int64)
            except ValueError as exc:
                raise RunError(str(exc), stage="initializing", kind="ScenarioError") from None
        else:
            stances = rng.integers(-2, 3, size=n).astype(np.int64)
        groups = assign_groups(personas, stances, rng)
        followees = build_network(groups, params.degree, params.homophily, rng)
        ctx.emit(
            "network_built",
            None,
            ties=int(followees.size),
            groups=int(groups.max()) + 1 if n else 0,
            withinGroupShare=within_group_share(followees, groups),
        )

        header = _HEADER[params.framing].format(topic=params.topic)
        post_lines = [f'Someone you follow posted: "{text}"' for text in _POSTS[params.framing]]
        intervention = params.intervention
        # The promoted item a treated reader gets, by the reader's current stance.
        promoted_lines = [
            _BALANCED
            if intervention is None or intervention.message == "balanced" or k == NEUTRAL
            else "The platform adds a post from someone who sees it differently: "
            f'"{_POSTS[params.framing][4 - k]}"'
            for k in range(5)
        ]
        treated = np.zeros(n, dtype=bool)
        memories: list[deque[Mapping[str, Any]]] = [
            deque(maxlen=params.memory_window) for _ in range(n)
        ]
        feed_posts = same_group_posts = 0

        for t in range(steps):
            ctx.begin_step(t)
            if intervention is not None and t == intervention.timing:
                chosen = choose_treated(
                    intervention.selection,
                    round(intervention.dose * n),
                    stances,
                    groups,
                    followees,
                    rng,
                )
                treated[chosen] = True
                ctx.count("treatedAgents", len(chosen))
                ctx.emit(
                    "intervention_started",
                    None,
                    treated=len(chosen),
                    selection=intervention.selection,
                    message=intervention.message,
                )
            active = np.asarray(ctx.activate(t), dtype=np.int64)
            if n - len(active):
                ctx.count("inactiveTurns", n - len(active))
            if len(active) == 0:
                self._summary(stances, 0, 0)
                continue

            feeds = select_feed(
                followees[active],
                stances[active],
                stances,
                params.feed_size,
                params.recommender,
                rng,
            )
            shown, same = int(feeds.size), int((groups[feeds] == groups[active][:, None]).sum())
            feed_posts += shown
            same_group_posts += same
            ctx.count("feedPosts", shown)
            ctx.count("sameGroupPosts", same)

            feed_rows: list[list[int]] = (stances[feeds] + 2).tolist()
            own_rows: list[int] = (stances[active] + 2).tolist()
            promoted = treated[active].tolist()
            items: list[tuple[int, DecisionRequest]] = []
            for a, row, own, extra in zip(
                active.tolist(), feed_rows, own_rows, promoted, strict=True
            ):
                lines = [post_lines[k] for k in row]
                if extra:
                    lines.append(promoted_lines[own])
                situation = (
                    f"{header}\n\nYour feed:\n"
                    + "\n".join(lines)
                    + f"\n\nSo far you {_PHRASE[own]}."
                )
                items.append(
                    (
                        a,
                        DecisionRequest(
                            situation=situation,
                            instructions=INSTRUCTIONS,
                            options=STANCES,
                            memory=tuple(memories[a]),
                            goals=GOALS,
                            view={"current": STANCES[own], "feed": tuple(STANCES[k] for k in row)},
                            kind="stance",
                        ),
                    )
                )
            n_promoted = sum(promoted)
            if n_promoted:
                ctx.count("interventionMessages", n_promoted)

            decisions = ctx.decide_many(items)
            new = stances.copy()
            substituted = 0
            for (a, _), row, own, decision in zip(
                items, feed_rows, own_rows, decisions, strict=True
            ):
                k = own
                if decision.option is None:
                    substituted += 1
                else:
                    k = STANCE_INDEX[decision.option]
                    new[a] = k - 2
                if params.memory_window:
                    memories[a].append(_memory_record(t, row, k))
            if substituted:
                ctx.count("substitutedDecisions", substituted)
            changed = int((new != stances).sum())
            stances = new
            self._summary(stances, changed, substituted)

        edges = follow_edges(followees)
        final = np.bincount(stances + 2, minlength=5)
        return WorldOutcome(
            metrics=echo_metrics(stances, edges, same_group_posts, feed_posts),
            distributions={
                "finalStance": {label: int(c) for label, c in zip(STANCES, final, strict=True)}
            },
        )

    def _summary(self, stances: IntArray, changed: int, substituted: int) -> None:
        counts = np.bincount(stances + 2, minlength=5)
        self.ctx.emit(
            "stances",
            None,
            counts={label: int(c) for label, c in zip(STANCES, counts, strict=True)},
            meanStance=float(stances.mean()) if len(stances) else None,
            changed=changed,
            substituted=substituted,
        )


def _memory_record(t: int, feed: Sequence[int], stance: int) -> dict[str, Any]:
    counts = [0] * 5
    for k in feed:
        counts[k] += 1
    read = ", ".join(f"{STANCES[k]} ({c})" for k, c in enumerate(counts) if c)
    return {
        "step": t + 1,
        "feed": read,
        "stance": STANCES[stance],
        "text": f"Step {t + 1}: your feed showed {read}; you said you {_PHRASE[stance]}.",
    }
