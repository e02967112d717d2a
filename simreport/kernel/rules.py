"""Rule executors: fixed strategies that decide without a language model."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..core.errors import RunError
from .registry import Registry
from .world import DecisionRequest

Rule = Callable[[DecisionRequest, Mapping[str, Any], np.random.Generator], str]

RULES: Registry[Rule] = Registry("rule")


def _need(request: DecisionRequest, key: str, rule: str) -> Any:
    if key not in request.view:
        raise RunError(
            f"rule {rule!r} needs {key!r}, which this world's {request.kind!r} decisions do not "
            "provide",
            stage="running",
            kind="RuleNotApplicable",
        )
    return request.view[key]


@RULES.register("tit_for_tat")
def tit_for_tat(
    request: DecisionRequest, params: Mapping[str, Any], rng: np.random.Generator
) -> str:
    """Open with the first option, then copy the partner's last move."""
    last = _need(request, "partnerLast", "tit_for_tat")
    return str(last) if last in request.options else request.options[0]


@RULES.register("grim_trigger")
def grim_trigger(
    request: DecisionRequest, params: Mapping[str, Any], rng: np.random.Generator
) -> str:
    """The first option until the partner ever picks another, then the last option for good."""
    betrayed = bool(_need(request, "partnerEverDefected", "grim_trigger"))
    return request.options[-1] if betrayed else request.options[0]


@RULES.register("constant")
def constant(request: DecisionRequest, params: Mapping[str, Any], rng: np.random.Generator) -> str:
    """Always the option named by `params.option` (default: the first)."""
    option = params.get("option", request.options[0])
    if option not in request.options:
        raise RunError(
            f"rule 'constant' option {option!r} is not one of {', '.join(request.options)}",
            kind="RuleNotApplicable",
        )
    return str(option)


@RULES.register("random")
def random_choice(
    request: DecisionRequest, params: Mapping[str, Any], rng: np.random.Generator
) -> str:
    """A uniformly random option."""
    return request.options[int(rng.integers(len(request.options)))]


@RULES.register("keep")
def keep(request: DecisionRequest, params: Mapping[str, Any], rng: np.random.Generator) -> str:
    """Repeat the agent's own current choice (a stubborn agent)."""
    current = _need(request, "current", "keep")
    return str(current) if current in request.options else request.options[0]
