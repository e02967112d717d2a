"""The `/v1/sim` calls (`SimClient`): one method per call, each sent through `Transport` (its
retries, its errors) and each applying the rest of the service's error semantics itself: a 409
on start_run or cancel reads the run's state into the error, and a 410 on events resumes from
the run's snapshot (`events`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any
from urllib.parse import quote

from .errors import RemoteError, StateConflict
from .events import EventPage, follow, page_of, read_page
from .transport import Transport


@dataclass(frozen=True)
class StartedRun:
    """A run the service accepted (202): queued with its frozen manifest, not yet started."""

    run_id: str
    manifest_id: str


class SimClient(Transport):
    """The `/v1/sim` calls, each with bounded retries; a context manager that closes its
    connections.

    Args:
        base_url: the service's URL (http:// or https://), without `/v1/sim`.
        token: the bearer token.
        timeout: the seconds one HTTP exchange may take.
        max_retries: the retries of one call after its first attempt.
        max_wait: the longest wait between attempts; a Retry-After longer than this raises
            `RateLimited` or `ServiceUnavailable` at once instead of waiting.
        backoff: the first wait when the service gives no Retry-After, doubled per attempt
            (with jitter).
        sleep: how the client waits (tests pass a recorder).
        token_source: where the token came from, named in the message of a 401 or 403.

    Raises:
        RemoteError: the URL is not an http(s) URL.
        NotAuthenticated: the token is empty or holds white space.
        ValueError: a timeout that is not positive, or a negative retry setting.
    """

    def __repr__(self) -> str:
        return f"SimClient({self.base_url!r})"

    # ------------------------------------------------------------------ scenarios

    def create_scenario(
        self,
        namespace: str,
        name: str,
        *,
        owner: str,
        risk_level: str,
        idempotency_key: str | None = None,
    ) -> str:
        """Create a scenario (201).

        Args:
            namespace: the namespace of the token's tenant it belongs to.
            name: its name, unique in the namespace.
            owner: who owns it.
            risk_level: "low", "medium" or "high" (a high-risk version is published only with
                a risk sign-off).
            idempotency_key: the key to send (default: a fresh one); repeating a call with the
                key of one that failed gets the original answer.

        Returns:
            The scenario's id.

        Raises:
            StateConflict: the name is taken in the namespace (409).
            InvalidRequest: a field the service refuses (422).
            RemoteError: any other refusal, or no answer (`ServiceUnavailable`) after the
                retries.
        """
        body = {"namespace": namespace, "name": name, "owner": owner, "risk_level": risk_level}
        data = self._write("create scenario", "/v1/sim/scenarios", body, key=idempotency_key)
        return str(_field(data, "scenario_id", "create scenario"))

    def submit_version(
        self,
        scenario_id: str,
        version: str,
        spec: Mapping[str, Any],
        *,
        source: str,
        idempotency_key: str | None = None,
    ) -> str:
        """Submit a version of a scenario for review (202).

        Args:
            scenario_id: the scenario's id.
            version: the version's name (a semantic version).
            spec: the scenario document.
            source: where it comes from (an incident, a ticket), recorded with the version.
            idempotency_key: the key to send (default: a fresh one).

        Returns:
            The version's review status ("reviewing").

        Raises:
            StateConflict: the version exists (409).
            InvalidRequest: the spec fails the scenario schema or the execution policy (422,
                with the located errors).
            RemoteError: any other refusal, or no answer (`ServiceUnavailable`) after the
                retries.
        """
        body = {"version": version, "spec": dict(spec), "source": source}
        data = self._write(
            "submit version",
            f"/v1/sim/scenarios/{_segment(scenario_id)}/versions",
            body,
            key=idempotency_key,
        )
        return str(_field(data, "status", "submit version"))

    # ------------------------------------------------------------------ runs

    def start_run(
        self,
        scenario_id: str,
        version: str,
        *,
        mode: str = "surrogate",
        seed: int | None = None,
        budget: Mapping[str, Any] | None = None,
        purpose: str = "exploration",
        idempotency_key: str | None = None,
    ) -> StartedRun:
        """Queue a run (202: accepted with a frozen manifest, not started).

        Args:
            scenario_id: the scenario's id.
            version: the version to run.
            mode: how the environment's backend runs ("surrogate").
            seed: the run's seed (default: the scenario's).
            budget: replaces the scenario's execution.budget (any of maxTurns, maxToolCalls,
                wallClock).
            purpose: "exploration", or "regression", which needs every version the run
                resolves online.
            idempotency_key: the key to send (default: a fresh one).

        Returns:
            The run's id and its manifest's id.

        Raises:
            StateConflict: the key was used with another body (409), not retried; the run that
                key started is read and attached (`state`) when the service names it.
            InvalidRequest: the request, or the version under the execution policy, cannot run
                (422).
            RateLimited: the token's concurrent runs stayed at its quota (429).
            RemoteError: any other refusal, or no answer (`ServiceUnavailable`) after the
                retries.
        """
        body: dict[str, Any] = {
            "scenario_id": scenario_id,
            "version": version,
            "mode": mode,
            "seed": seed,
            "budget": dict(budget) if budget is not None else None,
            "purpose": purpose,
        }
        try:
            data = self._write("start run", "/v1/sim/runs", body, key=idempotency_key)
        except StateConflict as conflict:
            raise self._with_run_state(conflict, _run_id_of(conflict.body)) from None
        return StartedRun(
            run_id=str(_field(data, "run_id", "start run")),
            manifest_id=str(_field(data, "manifest_id", "start run")),
        )

    def run_status(self, run_id: str) -> dict[str, Any]:
        """A run's status.

        Args:
            run_id: the run's id.

        Returns:
            {execution_status, validity_status, evidence_status, quality_ref, attempt};
            execution_status is `cancelling` while a cancellation is carried out.

        Raises:
            NoSuchResource: no such run in the token's tenant (404).
            RemoteError: any other refusal, or no answer after the retries.
        """
        return self._read("run status", f"/v1/sim/runs/{_segment(run_id)}")

    def cancel(
        self, run_id: str, *, reason: str, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Ask the service to cancel a run (202): a pending run ends at once, a running one at
        its next step (its status reads `cancelling` until it has ended: `cancelled`, or what
        it ended as when it finished before the stop reached it).

        Args:
            run_id: the run's id.
            reason: why, recorded with the cancellation.
            idempotency_key: the key to send (default: a fresh one).

        Returns:
            The service's answer: {execution_status: "cancelled"} for a pending run,
            {execution_status: "cancelling"} for a running one.

        Raises:
            StateConflict: the run has already ended (409), not retried; it carries the run's
                current state.
            RemoteError: any other refusal, or no answer after the retries.
        """
        try:
            return self._write(
                "cancel run",
                f"/v1/sim/runs/{_segment(run_id)}:cancel",
                {"reason": reason},
                key=idempotency_key,
            )
        except StateConflict as conflict:
            raise self._with_run_state(conflict, run_id) from None

    def events(self, run_id: str, after_seq: int = 0) -> EventPage:
        """One page of a run's events.

        Args:
            run_id: the run's id.
            after_seq: the cursor: the last seq already read (0: from the start).

        Returns:
            The events after `after_seq` and the cursor to ask with next. When that cursor has
            expired (410) the snapshot is read instead: the run's status (`snapshot`) and the
            events from the oldest cursor the service still serves (its hint, else the start).

        Raises:
            CursorExpired: the cursor expired and no newer one could be read.
            InvalidRequest: the cursor is past the run's last event (422 `cursor_past_end`;
                its body's `next_seq` is the run's last seq).
            RemoteError: any other refusal, or no answer after the retries.
        """
        return read_page(
            partial(self._events_page, run_id), partial(self.run_status, run_id), after_seq
        )

    def follow_events(
        self,
        run_id: str,
        after_seq: int = 0,
        *,
        poll_interval: float = 1.0,
        on_gap: Callable[[EventPage], None] | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Every event of a run after `after_seq`, as it appears, until the run has ended and
        its last events are read. Each seq is yielded once.

        Args:
            run_id: the run's id.
            after_seq: the last seq already read (0: from the start).
            poll_interval: the seconds to wait between reads while nothing new has come.
            on_gap: told, with the page that resumed, when an expired cursor made the client go
                on from the snapshot (the events in between are no longer served).

        Returns:
            An iterator of the events, in order.

        Raises:
            RemoteError: a refusal, or no answer after the retries, while reading.
        """
        return follow(
            partial(self.events, run_id),
            partial(self.run_status, run_id),
            after_seq,
            poll_interval=poll_interval,
            sleep=self._sleep,
            on_gap=on_gap,
        )

    def evidence(self, run_id: str, criterion: str | None = None) -> dict[str, Any]:
        """A run's evidence.

        Args:
            run_id: the run's id.
            criterion: only this criterion's (default: every one).

        Returns:
            {records, observations, evidence, completeness}.

        Raises:
            StateConflict: the run has not ended: its evidence has not converged (409).
            NoSuchResource: no such run, or criterion, in the token's tenant (404).
            RemoteError: any other refusal, or no answer after the retries.
        """
        params = {"criterion": criterion} if criterion is not None else None
        return self._read("evidence", f"/v1/sim/runs/{_segment(run_id)}/evidence", params)

    def manifest(self, manifest_id: str) -> dict[str, Any]:
        """The frozen composition a run executes.

        Args:
            manifest_id: the manifest's id (`StartedRun.manifest_id`).

        Returns:
            {resolved, locked, manifest_sha256}: `manifest_sha256` is the sha256 of the
            canonical JSON of `locked` (sorted keys, no spaces, UTF-8), an agent-testbed
            run's manifestSha256.

        Raises:
            NoSuchResource: no such manifest in the token's tenant (404).
            RemoteError: any other refusal, or no answer after the retries.
        """
        return self._read("manifest", f"/v1/sim/manifests/{_segment(manifest_id)}")

    # ------------------------------------------------------------------ plumbing

    def _events_page(self, run_id: str, after_seq: int) -> EventPage:
        data = self._read(
            "events", f"/v1/sim/runs/{_segment(run_id)}/events", {"after_seq": after_seq}
        )
        return page_of(data, after_seq)

    def _with_run_state(self, conflict: StateConflict, run_id: str | None) -> StateConflict:
        """The 409 with the run's current state read and named in its message."""
        state: dict[str, Any] | None = None
        message = conflict.message
        if run_id:
            try:
                state = self.run_status(run_id)
            except RemoteError as exc:
                message += f"; reading run {run_id} failed too: {exc.message}"
            else:
                now = str(state.get("execution_status", "unknown"))
                if now not in message:
                    message += f"; run {run_id} is {now}"
        return StateConflict(
            message,
            state=state,
            status=conflict.status,
            code=conflict.code,
            body=conflict.body,
            idempotency_key=conflict.idempotency_key,
            attempts=conflict.attempts,
        )


def _segment(value: str) -> str:
    """An id as one URL path segment (no `/`, `?` or `#` can change the route)."""
    return quote(str(value), safe="@-._~")


def _field(data: Mapping[str, Any], name: str, what: str) -> Any:
    if data.get(name) is None:
        raise RemoteError(f"{what}: the service's answer has no {name}", code="bad_body")
    return data[name]


def _run_id_of(error: Mapping[str, Any]) -> str | None:
    """The run a 409 on start_run points at, when the service names it."""
    run_id = error.get("run_id")
    return run_id if isinstance(run_id, str) and run_id else None
