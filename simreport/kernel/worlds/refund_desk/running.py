"""RUNNING: the conversation, turn by turn — the user's message, the agent's steps (tool calls
through the gateway, then a reply), the planned faults on each turn — until the user closes it
or the budget runs out."""

from __future__ import annotations

from ...run_cost import ENVIRONMENT, SUT, USER_WORDING
from ...testbed.agents import AgentStep
from ...testbed.clock import Clocks
from ...testbed.user import read_agent_message
from .budget import Budget, BudgetExhausted
from .state import RunState


class Running(RunState):
    """The RUNNING stage of a run."""

    def _converse(self) -> None:
        s = self.scenario
        budget = Budget.of(s)
        turn_ms = s.interaction.turn_ms if s.interaction is not None else 20_000
        started = Clocks.monotonic_ns()

        turn = 1
        self.ctx.begin_step(turn)
        self.faults.on_turn(turn)
        with self.ctx.cost.timed(USER_WORDING, operations=1):
            message = self.user.opening()
        closed_by, goal = "user_silent", False
        if message.text is not None:
            self.session.user(message.text)
        while message.text is not None and not message.ends:
            texts: list[str] = []
            self._note_delivery(turn)
            for _ in range(budget.per_turn):
                if Clocks.monotonic_ns() - started > budget.wall_limit_ns:
                    raise BudgetExhausted(f"wall clock over {budget.wall_limit_ns / 1e9:g} s")
                step = self._agent_step()
                if step.tool_calls:
                    self.session.assistant(step)
                    for call in step.tool_calls:
                        if self.gateway.calls >= budget.max_calls:
                            raise BudgetExhausted(f"more than {budget.max_calls} tool calls")
                        with self.ctx.cost.timed(ENVIRONMENT, operations=1):
                            result = self.gateway.call(
                                call.name, call.arguments, f"call-{self.gateway.calls + 1:04d}"
                            )
                        self.ctx.count("toolCalls")
                        self.session.tool(call.id, result.body)
                    continue
                if step.lost is not None:
                    # The provider's decision was lost: the turn ends without a message, but
                    # that is missing evidence (see completeness), not the agent falling silent.
                    self.log.add(
                        "agent.decision_lost",
                        "harness",
                        "control",
                        {"turn": turn, "failure": step.lost},
                    )
                    self.ctx.count("agentDecisionsLost")
                    break
                if step.reply:
                    self.session.assistant(step)
                    self.log.add(
                        "agent.message",
                        "agent",
                        "message",
                        {"turn": turn, "text": step.reply, "signals": self._signals(step.reply)},
                    )
                    texts.append(step.reply)
                    break
                self.log.add("agent.silent", "agent", "control", {"turn": turn})
                self.ctx.count("agentSilentSteps")
                break
            else:
                self.log.add(
                    "agent.step_cap", "harness", "control", {"turn": turn, "cap": budget.per_turn}
                )
                self.ctx.count("agentStepCaps")
            if turn >= budget.max_turns:
                raise BudgetExhausted(f"{budget.max_turns} user turns without closing")
            self.clocks.advance(turn_ms)
            self.ctx.cost.charge(USER_WORDING, logical_ms=turn_ms)  # the user's time to answer
            turn += 1
            self.ctx.begin_step(turn)
            self.faults.on_turn(turn)
            with self.ctx.cost.timed(ENVIRONMENT):
                self.gateway.process_backlog()
            with self.ctx.cost.timed(USER_WORDING, operations=1):
                message = self.user.reply(texts)
            if message.text is not None:
                self.session.user(message.text)
        if message.text is None:
            closed_by = "user_silent"
        elif message.goal_reached:
            closed_by, goal = "resolved_by_user", True
        else:
            closed_by = "user_gave_up"
        self.log.add(
            "conversation.closed",
            "harness",
            "control",
            {"closedBy": closed_by, "goalReached": goal, "turns": turn},
        )

    def _signals(self, text: str) -> list[str]:
        """What a reader takes from an agent message (recorded with it)."""
        return list(read_agent_message(text, self.user.wording.order_number_pattern).signals)

    def _note_delivery(self, turn: int) -> None:
        """The agent point of a linked event (t2): the user's message that opened it is handed
        to the agent now, at the agent's next call."""
        last = next((r for r in reversed(self.log.records) if r["type"] == "user.message"), None)
        opened = last.get("linkage") if last is not None else None
        if last is None or not isinstance(opened, dict) or opened.get("point") != "user":
            return
        link = self.log.linkage(str(opened["id"]), "agent")
        if link is not None:
            self.log.add(
                "agent.received",
                "agent",
                "message",
                {"turn": turn, "userRecord": last["recordId"], "event": opened["event"]},
                linkage=link,
            )

    def _agent_step(self) -> AgentStep:
        self.agent_calls += 1
        self.ctx.count("agentCalls")
        started = Clocks.monotonic_ns()
        with self.ctx.cost.timed(SUT, operations=1):
            step = self.agent.step(self.session)
        for key, name in (
            ("prompt_tokens", "agentPromptTokens"),
            ("completion_tokens", "agentCompletionTokens"),
        ):
            if key in step.usage:
                self.ctx.count(name, step.usage[key])
        if self.agent_asset.adapter in ("http", "python") and self.replay is None:
            # The SUT's own model call, as its endpoint reports it (a replay calls nothing).
            self.ctx.cost.charge(
                SUT,
                llm_calls=1,
                prompt_tokens=step.usage.get("prompt_tokens", 0),
                completion_tokens=step.usage.get("completion_tokens", 0),
            )
        self.log.add(
            "agent.step",
            "agent",
            "control",
            {"adapter": self.agent_asset.adapter, "step": step.to_doc()},
            duration_ns=Clocks.monotonic_ns() - started,
        )
        return step
