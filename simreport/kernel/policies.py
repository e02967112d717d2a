"""Activation policies: which agents act in a step."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np
from pydantic import Field

from ..core.schema import Model
from ..core.values import Int64, Number
from .registry import Registry


class NoOptions(Model):
    """This policy takes no options."""


class Policy(ABC):
    name: ClassVar[str]
    Options: ClassVar[type[Model]] = NoOptions

    def __init__(self, options: Model, n_agents: int) -> None:
        self.options = options
        self.n = n_agents

    @abstractmethod
    def select(self, step: int, rng: np.random.Generator) -> list[int]:
        """Indices of the agents that act in `step`, ascending."""


POLICIES: Registry[type[Policy]] = Registry("activation policy")


@POLICIES.register("all")
class AllAgents(Policy):
    """Every agent acts in every step."""

    name = "all"

    def select(self, step: int, rng: np.random.Generator) -> list[int]:
        return list(range(self.n))


class BernoulliOptions(Model):
    p: Number = Field(0.5, ge=0, le=1, description="Probability that an agent acts in a step.")


@POLICIES.register("bernoulli")
class Bernoulli(Policy):
    """Each agent acts independently with probability p."""

    name = "bernoulli"
    Options = BernoulliOptions

    def select(self, step: int, rng: np.random.Generator) -> list[int]:
        p = float(self.options.p)  # type: ignore[attr-defined]
        draws = rng.random(self.n)
        return [int(i) for i in np.flatnonzero(draws < p)]


class RoundRobinOptions(Model):
    per_step: Int64 = Field(1, ge=1, description="How many agents act per step, in turn.")


@POLICIES.register("round_robin")
class RoundRobin(Policy):
    """Agents take turns in index order, `perStep` at a time."""

    name = "round_robin"
    Options = RoundRobinOptions

    def select(self, step: int, rng: np.random.Generator) -> list[int]:
        k = min(int(self.options.per_step), self.n)  # type: ignore[attr-defined]
        start = (step * k) % self.n
        return sorted({(start + i) % self.n for i in range(k)})
