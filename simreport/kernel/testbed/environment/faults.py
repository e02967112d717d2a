"""Fault injection: the `FaultController` decides (plans, arms, matches, recovers and verifies
each fault on the run's logical clock, recording every step) and a `FaultBackend` executes, in
this process or, in a replay, striking exactly the calls the recorded run's hits name."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ....core.testbed_schema import FaultTrigger
from ..records import RecordLog


class FaultBackend(ABC):
    """Executes fault experiments; the harness decides when, on what and whether it recovered."""

    name = "backend"

    @abstractmethod
    def arm(self, trigger: FaultTrigger) -> str:
        """Start an experiment for `trigger`; return its experiment id."""

    @abstractmethod
    def match(self, target: str, call_index: int) -> str | None:
        """The armed experiment that strikes this call (the `call_index`-th call to `target`)."""

    @abstractmethod
    def disarm(self, experiment_id: str) -> bool:
        """Destroy an experiment; True when the service is back to normal."""

    @abstractmethod
    def active(self) -> list[str]:
        """Experiments currently armed."""


class InProcessFaultBackend(FaultBackend):
    """Faults injected inside this process, in the tool gateway's path."""

    name = "in-process"

    def __init__(self) -> None:
        self._armed: dict[str, FaultTrigger] = {}
        self._serial = 0

    def arm(self, trigger: FaultTrigger) -> str:
        self._serial += 1
        experiment = f"inproc-{trigger.id}-{self._serial}"
        self._armed[experiment] = trigger
        return experiment

    def match(self, target: str, call_index: int) -> str | None:
        for experiment, trigger in self._armed.items():
            first = trigger.at.call or 1
            if trigger.target == target and call_index >= first:
                return experiment
        return None

    def disarm(self, experiment_id: str) -> bool:
        self._armed.pop(experiment_id, None)
        return experiment_id not in self._armed

    def active(self) -> list[str]:
        return list(self._armed)


class RecordedFaultBackend(InProcessFaultBackend):
    """Replays faults: strikes exactly the calls a recorded run's `fault.hit` records name."""

    name = "recorded"

    def __init__(self, hits: Iterable[tuple[str, str, int]]) -> None:
        super().__init__()
        self._hits = set(hits)  # (fault id, target, call index)

    def match(self, target: str, call_index: int) -> str | None:
        for experiment, trigger in self._armed.items():
            if (trigger.id, target, call_index) in self._hits:
                return experiment
        return None


# --------------------------------------------------------------------------- fault controller


@dataclass(frozen=True)
class RecoveryCheck:
    """What verifying a recovery found: what was checked and what did not hold. `pending`
    when requests the fault held are still in the backlog (verified once they are processed)."""

    checked: Mapping[str, list[str]]
    problems: list[str]
    pending: bool = False
    unverifiable: str | None = None
    """Why the recovery cannot be checked (a real backend that shows no state), or None."""


@dataclass
class FaultState:
    trigger: FaultTrigger
    experiment: str | None = None
    armed_at_ms: int = 0
    hits: int = 0
    verifying: bool = False
    """The experiment is destroyed; the recovery waits for its verification."""
    settled: str | None = None  # "recovered" | "failed"

    @property
    def open(self) -> bool:
        return self.experiment is not None and self.settled is None and not self.verifying


class FaultController:
    """The harness side of fault injection: plans, arms, matches, recovers, verifies the recovery
    (`verify`: the fault id → what the fact model shows) and records each step. Windows move on
    the run's logical clock, read from the record log's clocks."""

    def __init__(
        self,
        triggers: Sequence[FaultTrigger],
        backend: FaultBackend,
        log: RecordLog,
        on_recover: Callable[[str], None],
        *,
        verify: Callable[[str], RecoveryCheck],
    ) -> None:
        self.backend = backend
        self.log = log
        # Every trigger has an id here (the scenario numbers unnamed ones fault-<n>).
        named = [
            t if t.id else t.model_copy(update={"id": f"fault-{n}"})
            for n, t in enumerate(triggers, start=1)
        ]
        self.states = {str(t.id): FaultState(t) for t in named}
        self._on_recover = on_recover
        self._verify = verify

    @property
    def now_ms(self) -> int:
        return self.log.clocks.logical_ms

    def _record(self, stage: str, state: FaultState, **detail: Any) -> None:
        t = state.trigger
        self.log.add(
            f"fault.{stage}",
            "harness",
            "control",
            {"faultId": t.id, "target": t.target, **detail},
            span_key=f"fault:{t.id}",
        )

    def plan(self) -> None:
        for state in self.states.values():
            t = state.trigger
            delay = {"delayMs": t.delay_ms} if t.effect == "delay" else {}
            self._record(
                "planned",
                state,
                effect=t.effect,
                position=t.position,
                at=t.at.to_doc(),
                recover=t.recover.to_doc(),
                timeoutMs=t.timeout_ms,
                atLogicalMs=t.at.logical_ms,
                recoverAfterMs=t.recover.after_ms,
                **delay,
            )

    def _arm(self, state: FaultState) -> None:
        state.experiment = self.backend.arm(state.trigger)
        state.armed_at_ms = self.now_ms
        self._record("armed", state, experiment=state.experiment)

    def arm_initial(self) -> None:
        """Faults whose window opens with the run (no `at.turn`, no later `at.logicalMs`)."""
        for state in self.states.values():
            at = state.trigger.at
            if at.turn is None and (at.logical_ms is None or at.logical_ms <= self.now_ms):
                self._arm(state)

    def tick(self) -> None:
        """At a scheduling point (a tool call, a turn boundary): close the windows whose logical
        time is up, then open those whose logical time has come."""
        for state in self.states.values():
            after = state.trigger.recover.after_ms
            if state.open and after is not None and self.now_ms >= state.armed_at_ms + after:
                self.close(state)
        for state in self.states.values():
            opens = state.trigger.at.logical_ms
            due = opens is not None and self.now_ms >= opens
            if due and state.experiment is None and state.settled is None:
                self._arm(state)

    def on_turn(self, turn: int) -> None:
        """At the start of user turn `turn`: recover faults due, then arm faults due."""
        self.tick()
        for state in self.states.values():
            if state.open and state.trigger.recover.turn == turn:
                self.close(state)
        for state in self.states.values():
            if state.experiment is None and state.settled is None and state.trigger.at.turn == turn:
                self._arm(state)

    def strike(self, target: str, call_index: int, call_id: str) -> FaultTrigger | None:
        """The fault that lands on this call, recorded as hit; None for a normal call."""
        experiment = self.backend.match(target, call_index)
        if experiment is None:
            return None
        state = next(s for s in self.states.values() if s.experiment == experiment)
        state.hits += 1
        t = state.trigger
        self._record(
            "hit",
            state,
            experiment=experiment,
            callId=call_id,
            callIndex=call_index,
            effect=t.effect,
            position=t.position,
            **({"delayMs": t.delay_ms} if t.effect == "delay" else {}),
        )
        return t

    def after_call(self, fault: FaultTrigger) -> None:
        state = self.states[str(fault.id)]
        limit = fault.recover.after_hits
        if state.open and limit is not None and state.hits >= limit:
            self.recover(state)

    def recover(self, state: FaultState) -> None:
        """Destroy the experiment, release what it held, then verify the recovery."""
        assert state.experiment is not None
        ok = self.backend.disarm(state.experiment)
        if not ok or state.experiment in self.backend.active():
            state.settled = "failed"
            self._record("failed", state, experiment=state.experiment, reason="not_recovered")
            return
        self._on_recover(str(state.trigger.id))
        state.verifying = True
        self._check(state)

    def _check(self, state: FaultState) -> None:
        check = self._verify(str(state.trigger.id))
        if check.pending:
            return
        state.verifying = False
        checked = {key: list(ids) for key, ids in check.checked.items()}
        if check.unverifiable is not None:
            # Recovered, not verified: such a run never enters a conclusion.
            state.settled = "recovered"
            self._record(
                "recovered",
                state,
                experiment=state.experiment,
                verified=False,
                reason=check.unverifiable,
            )
        elif check.problems:
            state.settled = "failed"
            self._record(
                "failed",
                state,
                experiment=state.experiment,
                reason="inconsistent",
                problems=list(check.problems),
                checked=checked,
            )
        else:
            state.settled = "recovered"
            self._record(
                "recovered", state, experiment=state.experiment, verified=True, checked=checked
            )

    def settle(self) -> None:
        """Verify the recoveries that waited for the service's backlog."""
        for state in self.states.values():
            if state.verifying:
                self._check(state)

    def close(self, state: FaultState) -> None:
        """End a fault's window: recovered if it hit, failed (never hit) if not."""
        assert state.experiment is not None
        if state.hits == 0:
            self.backend.disarm(state.experiment)
            state.settled = "failed"
            self._record("failed", state, experiment=state.experiment, reason="never_hit")
        else:
            self.recover(state)

    def drain(self) -> None:
        """Stop injecting: settle every fault that is still open."""
        for state in self.states.values():
            if state.settled is not None or state.verifying:
                continue
            if state.experiment is None:
                state.settled = "failed"
                self._record("failed", state, reason="never_armed")
            else:
                self.close(state)

    def violations(self) -> list[str]:
        """Why the run's fault plan did not hold (empty when every fault hit and recovered)."""
        out = []
        for fid, state in self.states.items():
            if state.settled != "recovered":
                out.append(f"fault {fid} did not hit and recover")
        return out
