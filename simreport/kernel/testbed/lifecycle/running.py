"""RUNNING: the conversation, turn by turn — the user's message, the agent's steps (tool calls
through the gateway, then a reply), the planned faults on each turn — until the user closes it
or the budget runs out. With `user.tasks`, each task's sessions in order, one conversation each
(recorded as `task.started`/`task.ended` and `session.opened`/`session.closed`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ....core.testbed_schema import UserSession, UserTask
from ...run_cost import ENVIRONMENT, SUT, USER_WORDING
from ..agents import AgentStep, Session
from ..clock import Clocks
from .budget import Budget, BudgetExhausted
from .state import RunState

CLOSED_OUTCOME = {"resolved_by_user": "resolved", "user_gave_up": "abandoned"}
"""A task's outcome from how its conversation closed (`user_silent`: the simulated user found
no wording, which says nothing of the task)."""


@dataclass
class _Seen:
    """The SUT's own ids seen in one task or one session, first seen first."""

    task_ids: list[str] = field(default_factory=list)
    session_ids: list[str] = field(default_factory=list)
    answered: bool = False
    """The agent answered at least once (the SUT took the task on)."""

    def note(self, step: AgentStep) -> None:
        self.answered = self.answered or step.lost is None
        for found, seen in (
            (step.sut_task_id, self.task_ids),
            (step.sut_session_id, self.session_ids),
        ):
            if found is not None and found not in seen:
                seen.append(found)


def _ids(name: str, seen: list[str]) -> dict[str, object]:
    """`{name: first id or None}`, and every id under `<name>s` when the SUT changed it."""
    doc: dict[str, object] = {name: seen[0] if seen else None}
    if len(seen) > 1:
        doc[name + "s"] = list(seen)
    return doc


class Running(RunState):
    """The RUNNING stage of a run."""

    _seen: tuple[_Seen, ...] = ()
    """What the open task and session have seen (none outside `user.tasks`)."""

    def _converse(self) -> None:
        s = self.scenario
        assert s.user is not None
        started = Clocks.monotonic_ns()
        if s.user.tasks is None:
            self._conversation(Budget.of(s).max_turns, 1, started)
            return
        turn = 1
        for index, task in enumerate(s.user.tasks):
            turn = self._task(index, task, turn, started)

    def _task(self, index: int, task: UserTask, turn: int, started: int) -> int:
        """Run one task's sessions in order; returns the next run-wide turn. Its outcome:
        `resolved` when a session reached the goal, else how the last session ended."""
        assert self.scenario.user is not None
        if index > 0 or task.goal != self.scenario.user.goal:
            self._user_for(task)
        self.log.add("task.started", "harness", "control", {"taskKey": task.key, "goal": task.goal})
        seen, outcomes = _Seen(), []
        try:
            for number, session in enumerate(task.sessions):
                if index > 0 or number > 0:
                    self._come_back(seen)
                outcome, turn = self._session(task, session, seen, turn, started)
                outcomes.append(outcome)
        except BaseException as exc:
            outcomes.append("budget_exhausted" if isinstance(exc, BudgetExhausted) else "failed")
            raise
        finally:
            resolved = "resolved" in outcomes
            self.log.add(
                "task.ended",
                "harness",
                "control",
                {
                    "taskKey": task.key,
                    "outcome": "resolved" if resolved else outcomes[-1] if outcomes else "failed",
                    "agentAnswered": seen.answered,
                    **_ids("sutTaskId", seen.task_ids),
                },
            )
        return turn

    def _session(
        self, task: UserTask, session: UserSession, task_seen: _Seen, turn: int, started: int
    ) -> tuple[str, int]:
        """One conversation of a task; its outcome and the next run-wide turn."""
        where = {"taskKey": task.key, "sessionKey": session.key}
        self.log.add("session.opened", "harness", "control", where)
        seen = _Seen()
        self._seen = (task_seen, seen)
        max_turns = session.max_turns or Budget.of(self.scenario).max_turns
        closed_by, next_turn = "failed", turn
        try:
            closed_by, next_turn = self._conversation(max_turns, turn, started)
        except BudgetExhausted:
            closed_by = "budget_exhausted"
            raise
        finally:
            self._seen = ()
            self.log.add(
                "session.closed",
                "harness",
                "control",
                {
                    **where,
                    "closedBy": closed_by,
                    **_ids("sutSessionId", seen.session_ids),
                    **_ids("sutTaskId", seen.task_ids),
                },
            )
        return CLOSED_OUTCOME.get(closed_by, closed_by), next_turn

    def _come_back(self, task_seen: _Seen) -> None:
        """The user comes back in a new conversation: the agent's history starts empty (its
        task's id, when the SUT gave one, is sent again), the world's time has moved on."""
        turn_ms = self.scenario.interaction.turn_ms if self.scenario.interaction else 20_000
        self.session = Session(
            self.session.system,
            sut_task_id=task_seen.task_ids[-1] if task_seen.task_ids else None,
        )
        self.clocks.advance(turn_ms)
        with self.ctx.cost.timed(ENVIRONMENT):
            self.gateway.process_backlog()

    def _user_for(self, task: UserTask) -> None:
        """A user pursuing `task`'s goal: the scenario's user with that goal, keeping the
        counts and violations of the users before it."""
        before = self.user
        self._make_user(task.goal)
        self.user.counters, self.user.violations = before.counters, before.violations

    def _conversation(self, max_turns: int, first_turn: int, started: int) -> tuple[str, int]:
        """One conversation from run-wide turn `first_turn`, at most `max_turns` user turns;
        how it closed and the next run-wide turn."""
        s = self.scenario
        budget = Budget.of(s)
        turn_ms = s.interaction.turn_ms if s.interaction is not None else 20_000

        turn = first_turn
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
            if turn - first_turn + 1 >= max_turns:
                raise BudgetExhausted(f"{max_turns} user turns without closing")
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
            {"closedBy": closed_by, "goalReached": goal, "turns": turn - first_turn + 1},
        )
        return closed_by, turn + 1

    def _signals(self, text: str) -> list[str]:
        """What a reader takes from an agent message (recorded with it). Each world supplies its
        own."""
        raise NotImplementedError

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
        # The SUT's own ids, as it returned them: sent back in the conversation's next requests.
        self.session.sut_task_id = step.sut_task_id or self.session.sut_task_id
        self.session.sut_session_id = step.sut_session_id or self.session.sut_session_id
        for seen in self._seen:
            seen.note(step)
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
