"""One testbed run through the lifecycle: LOADING → INITIALIZING → RUNNING → DRAINING →
COLLECTING → CLEANED, or FAILED with the stage and the kind; a failure still winds the run down
(settle, collect, clean) and is raised as a `TestbedFailure` carrying its statuses. A world
subclasses `TestbedRun` and supplies its own parts (joint model, facts, user, observations,
metrics, and a built-in reference agent if it has one): the hooks that raise NotImplementedError."""

from __future__ import annotations

from ....core.errors import RunError
from ...run_cost import ENVIRONMENT, EVALUATION
from ...world import WorldOutcome
from ..agents import AgentError
from ..records import Observations
from . import TestbedFailure
from .budget import BudgetExhausted
from .collecting import Collecting
from .initializing import Initializing
from .loading import Loading
from .running import Running


class TestbedRun(Loading, Initializing, Running, Collecting):
    """One run through the lifecycle."""

    __test__ = False

    def execute(self) -> WorldOutcome:
        try:
            return self._execute()
        finally:
            if self.tracing is not None:
                self.tracing.finish()  # the run's spans end with it, however it ends

    def _execute(self) -> WorldOutcome:
        self.ctx.count("agentCalls", 0)  # stated even when the run never reaches the agent
        self.life.enter("LOADING")
        try:
            self._load()
        except TestbedFailure as loading_failure:
            loading_failure.evidence = "unchecked"
            self._fail(loading_failure)
            self._write_records()
            raise
        self.life.enter("INITIALIZING")
        try:
            self._initialize()
        except Exception as exc:  # failure is data: setting up failed, the run says why
            init_failure = TestbedFailure(
                f"initializing failed: {type(exc).__name__}: {exc}",
                stage="initializing",
                kind="initialization_failed",
                validity="violated",
            )
            self._fail(init_failure)
            self._cleanup()  # tear down what was set up
            self._write_records()
            raise init_failure from None
        self.life.enter("RUNNING")
        failure: TestbedFailure | None = None
        try:
            self._converse()
        except BudgetExhausted as exc:
            failure = TestbedFailure(
                str(exc), stage="running", kind="budget_exhausted", execution="cancelled"
            )
        except AgentError as exc:
            failure = TestbedFailure(exc.message, stage="running", kind=exc.kind)
        except RunError as exc:
            failure = TestbedFailure(exc.message, stage="running", kind=exc.kind)
        except Exception as exc:  # failure is data: the run fails, named by what was raised
            failure = TestbedFailure(
                f"{type(exc).__name__}: {exc}", stage="running", kind=type(exc).__name__
            )
        if failure is not None:
            # FAILED at once; the run still winds down below (settle, collect, clean).
            self.ctx.count("runningFailures")
            self._fail(failure)
        else:
            self.life.enter("DRAINING")
        try:
            with self.ctx.cost.timed(ENVIRONMENT):
                self._drain()
        except Exception as exc:  # failure is data: a validity problem of the run
            problem = f"draining failed: {type(exc).__name__}: {exc}"
            self.validity_problems.append(problem)
            if failure is None:
                failure = TestbedFailure(problem, stage="draining", kind="drain_failed")
                self._fail(failure)
            else:
                self.log.add("drain.failed", "harness", "control", {"error": problem})
        if failure is None:
            self.life.enter("COLLECTING")
        with self.ctx.cost.timed(EVALUATION):
            obs, evidence_status = self._collect()
        cleaned = self._cleanup()
        validity = (
            "violated"
            if self.validity_problems
            else ("unchecked" if self.qc_unchecked else "valid")
        )
        # The run's own statement of its validity, with each problem (a fact for readers of
        # the run, such as the audit's exclusion reasons; the run judges no criterion).
        self.log.add(
            "run.validity",
            "harness",
            "control",
            {"validity": validity, "problems": [*self.validity_problems, *self.qc_unchecked]},
        )
        if failure is None and cleaned:
            self.life.enter("CLEANED")
        elif failure is None:
            # The conversation ran to its end, but the world it leaves cannot be trusted.
            failure = TestbedFailure(
                f"cleanup failed: {self.cleanup_error}",
                stage="cleanup",
                kind="cleanup_failed",
                execution="completed",
            )
            self._fail(failure)
        self._write_records()
        if self.validity_problems:
            self.ctx.count("validityProblems", len(self.validity_problems))
        if failure is not None:
            failure.validity = validity
            failure.evidence = "partial" if failure.stage != "cleanup" else evidence_status
            raise failure
        closed = obs.get("conversation.closed_by")
        return WorldOutcome(
            metrics=self._metrics(obs),
            distributions={"outcome": {str(closed): 1}} if closed is not None else {},
            validity=validity,
            evidence=evidence_status,
        )

    def _metrics(self, obs: Observations) -> dict[str, float]:
        """The world's metrics, from the observations. Each world supplies its own."""
        raise NotImplementedError

    def _fail(self, failure: TestbedFailure) -> None:
        """Record the failure and enter FAILED, the final stage."""
        self.log.add(
            "run.failure",
            "harness",
            "control",
            {"stage": failure.stage, "kind": failure.kind, "message": failure.message},
        )
        self.life.enter("FAILED", failedIn=failure.stage, kind=failure.kind)
