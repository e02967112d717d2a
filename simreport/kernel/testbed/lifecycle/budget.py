"""How much one testbed conversation may do: user turns, tool calls, agent steps per turn
and real time, from the scenario's `execution` (the defaults where it says nothing). A run past
any of them stops with `BudgetExhausted`."""

from __future__ import annotations

from dataclasses import dataclass

from ....core.errors import RunError
from ....core.schema import Scenario


class BudgetExhausted(RunError):
    def __init__(self, what: str) -> None:
        super().__init__(f"budget exhausted: {what}")
        self.what = what


@dataclass(frozen=True)
class Budget:
    """The limits of one conversation."""

    max_turns: int
    max_calls: int
    wall_limit_ns: int
    per_turn: int
    """Agent steps (tool calls or a reply) in one user turn."""

    @classmethod
    def of(cls, scenario: Scenario) -> Budget:
        budget = scenario.execution.budget if scenario.execution is not None else None
        return cls(
            max_turns=budget.max_turns if budget is not None else 12,
            max_calls=budget.max_tool_calls if budget is not None else 30,
            wall_limit_ns=int((budget.wall_clock if budget is not None else 1200.0) * 1e9),
            per_turn=(
                scenario.execution.max_actions_per_turn if scenario.execution is not None else 6
            ),
        )
