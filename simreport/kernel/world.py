"""What a world is to the engine, and what the engine offers a world while it runs."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ..core.schema import Scenario, WorldParams

if TYPE_CHECKING:
    from .context import RunContext


@dataclass(frozen=True)
class DecisionRequest:
    """What one agent faces at one moment, in the world's own words.

    The engine renders it into a prompt according to the scenario's `prompt` settings and the
    executor's components, or hands `view` to a rule executor.
    """

    situation: str
    """The situation now, worded by the world (framing applied)."""
    instructions: str
    """Task instructions: what the agent must decide."""
    options: tuple[str, ...]
    """The answers the agent may give, in a fixed order."""
    memory: Sequence[Mapping[str, Any]] = ()
    """Remembered events as flat records, oldest first, already cut to the memory window."""
    goals: str | None = None
    """The agent's goal, shown when the executor includes the goals component."""
    view: Mapping[str, Any] = field(default_factory=dict)
    """Structured facts for rule executors (e.g. {'partnerLast': 'cooperate'})."""
    kind: str = "decision"
    """A short label for events and counters (e.g. 'move', 'stance')."""
    seed: int | None = None
    """The provider seed this decision must use (a world that pins a decision, such as a
    regression user's wording); None: the next seed of the run's decision stream."""


@dataclass(frozen=True)
class Decision:
    """An agent's answer. `option` is None when no valid answer could be obtained."""

    option: str | None
    source: str  # "llm" or "rule"
    raw: str = ""
    failure: str | None = None  # "parse", "llm", "prompt_too_long"

    @property
    def ok(self) -> bool:
        return self.option is not None


@dataclass
class Agent:
    index: int
    persona: dict[str, Any]
    executor: int
    """Index into scenario.executors."""


@dataclass
class WorldOutcome:
    """What a world hands back. Worlds that check their own rules or collect evidence (the agent
    testbed) set `validity` and `evidence`; others leave them to the engine's defaults."""

    metrics: dict[str, float]
    distributions: dict[str, dict[str, int]] = field(default_factory=dict)
    validity: str | None = None
    """valid | violated | unchecked; None: unchecked."""
    evidence: str | None = None
    """complete | partial | unchecked; None: complete unless decisions were lost."""


class World(ABC):
    """A simulated world. Subclasses declare their parameters, metrics and distributions and
    implement `run`; they get randomness, agents, activation and decisions from the context.

    The declarations are what `simreport worlds` lists, so an author needs no code: `Params`
    (a WorldParams model, every field described), and `metrics` and `distributions` as
    name → one-line description, in the order reports show them."""

    name: ClassVar[str]
    Params: ClassVar[type[WorldParams]]
    metrics: ClassVar[Mapping[str, str]]
    distributions: ClassVar[Mapping[str, str]] = {}
    min_agents: ClassVar[int] = 1
    pinned: ClassVar[tuple[str, ...]] = ()
    """Scenario paths (and everything under them) the world fixes or ignores: an axis there
    cannot change a run, so the catalogue offers no template that targets them."""
    code_packages: ClassVar[tuple[str, ...]] = ()
    """Packages (dotted names) whose code the world's results depend on, besides its module:
    their sources join the kernel fingerprint, so editing them makes earlier runs out of date."""

    def __init__(self, ctx: RunContext, params: Any) -> None:
        self.ctx = ctx
        self.params = params

    @classmethod
    def check(cls, scenario: Scenario, params: Any) -> list[tuple[str, str]]:
        """Cross-field checks beyond the params model: (dotted path, message) pairs."""
        problems: list[tuple[str, str]] = []
        if scenario.population.n < cls.min_agents:
            problems.append(("population.n", f"{cls.name} needs at least {cls.min_agents} agents"))
        return problems

    @classmethod
    def outputs(cls, scenario: Scenario, root: Path | None) -> tuple[list[str], list[str]]:
        """The metric and distribution names a run of `scenario` reports (`root`: its folder)."""
        return list(cls.metrics), list(cls.distributions)

    @classmethod
    def needs_provider(cls, scenario: Scenario) -> bool:
        """Whether a run of `scenario` needs the scenario's provider built for its LLM
        executors. A world that answers every decision from elsewhere in this run (the agent
        testbed while it replays a recorded run) says no, and the engine builds none: the run then
        makes no call and needs no endpoint or key."""
        return True

    @classmethod
    def input_files(cls, scenario: Scenario, root: Path) -> Mapping[str, Path | None]:
        """Files outside the scenario document that a run of `scenario` reads, by slot: the
        engine hashes them into the run's input key (`input_hashes`). None for a slot whose file
        does not resolve (the run will fail in LOADING). `root` is the scenario's folder."""
        return {}

    @abstractmethod
    def run(self) -> WorldOutcome:
        """Run every step and return the metrics and distributions."""

    @property
    def rng(self) -> np.random.Generator:
        return self.ctx.rng
