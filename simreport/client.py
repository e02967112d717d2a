"""A client for the run service's `/v1/sim` API (`SimClient`): one method per call, each
applying the service's error semantics itself. 429, 502–504, a dropped connection and a timeout
are retried, within bounds, with the same Idempotency-Key; 409 and 422 never are; a 410 on
events resumes from the run's snapshot. Whatever cannot be carried out raises a `RemoteError`
(a `SimreportError`) subclass named for the answer, never the server's error classes, and no
message holds the token. The design: docs/service.md.
"""

from __future__ import annotations

import email.utils
import math
import random
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from .core.errors import EXIT_INPUT, SimreportError
from .core.redaction import redact_secrets

TERMINAL = frozenset({"completed", "crashed", "cancelled"})
"""Execution statuses a run never leaves."""

TOKEN_SETTING = "--token-file or SIMREPORT_TOKEN_FILE"
"""Where the command line reads the bearer token from; named when the service refuses it."""

_RETRIED = frozenset({429, 502, 503, 504})
"""Answers worth asking again: rate limited, or the service (or its gateway) briefly away."""

_MAX_ISSUES_SHOWN = 5


# --------------------------------------------------------------------------- errors


class RemoteError(SimreportError):
    """The service refused a request or could not be reached. `status` is the HTTP status (None
    when no answer came), `code` the service's error code, `body` its error object (`{"code",
    "message", …}`), `idempotency_key` the key a write was sent with (retry with it later to
    get the original answer rather than a second write), `attempts` how many requests were sent
    before giving up."""

    exit_code = EXIT_INPUT

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        body: Mapping[str, Any] | None = None,
        retry_after: float | None = None,
        idempotency_key: str | None = None,
        attempts: int | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.body: dict[str, Any] = dict(body or {})
        self.retry_after = retry_after
        self.idempotency_key = idempotency_key
        self.attempts = attempts


class MalformedRequest(RemoteError):
    """400: the request is malformed (for instance a write without an Idempotency-Key)."""


class NotAuthenticated(RemoteError):
    """401: no token, or one the service does not know. The message names the token setting,
    never the token."""


class NotPermitted(RemoteError):
    """403: the token is known but may not act on this tenant or namespace."""


class NoSuchResource(RemoteError):
    """404: no such scenario, version, run or manifest (for this token's tenant)."""


class StateConflict(RemoteError):
    """409: read the state and do not retry. `state` is the run's current status when the
    client could read it (start_run with a reused key, cancel of a finished run)."""

    def __init__(
        self, message: str, *, state: Mapping[str, Any] | None = None, **details: Any
    ) -> None:
        super().__init__(message, **details)
        self.state: dict[str, Any] | None = dict(state) if state is not None else None


class CursorExpired(RemoteError):
    """410: the event cursor is older than the service's retention window, and no newer cursor
    could be found to resume from."""


class InvalidRequest(RemoteError):
    """422: the request cannot be carried out as it is; fix it and create anew. `errors` holds
    the located problems, each {path, message, expected}."""

    def __init__(
        self, message: str, *, errors: list[dict[str, Any]] | None = None, **details: Any
    ) -> None:
        super().__init__(message, **details)
        self.errors: list[dict[str, Any]] = list(errors or [])


class RateLimited(RemoteError):
    """429 after the allowed retries, or a Retry-After longer than the client waits."""


class ServiceUnavailable(RemoteError):
    """503 (or 502/504), a dropped connection or a timeout, after the allowed retries. A write
    can be sent again later with `idempotency_key`."""


_ERRORS: dict[int, type[RemoteError]] = {
    400: MalformedRequest,
    401: NotAuthenticated,
    403: NotPermitted,
    404: NoSuchResource,
    409: StateConflict,
    410: CursorExpired,
    422: InvalidRequest,
    429: RateLimited,
    502: ServiceUnavailable,
    503: ServiceUnavailable,
    504: ServiceUnavailable,
}


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class StartedRun:
    """A run the service accepted (202): queued with its frozen manifest, not yet started."""

    run_id: str
    manifest_id: str


@dataclass(frozen=True)
class EventPage:
    """One page of a run's events. `next_seq` is the cursor for the next page (the last seq
    seen). When the cursor asked for had expired (410), `snapshot` is the run's status read
    again and `expired_after` the cursor that had expired: the events after it up to the first
    one here are no longer served."""

    events: list[dict[str, Any]]
    next_seq: int
    snapshot: dict[str, Any] | None = None
    expired_after: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """The page as `simreport remote events --json` prints it.

        Returns:
            `events` and `next_seq`, with `snapshot` and `expired_after` after an expired
            cursor.
        """
        out: dict[str, Any] = {"events": self.events, "next_seq": self.next_seq}
        if self.snapshot is not None:
            out["snapshot"] = self.snapshot
            out["expired_after"] = self.expired_after
        return out


# --------------------------------------------------------------------------- the client


class SimClient:
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

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 30.0,
        max_retries: int = 5,
        max_wait: float = 60.0,
        backoff: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
        token_source: str = TOKEN_SETTING,
    ) -> None:
        url = base_url.strip().rstrip("/")
        if not url.startswith(("http://", "https://")):
            raise RemoteError(
                f"the service URL must start with http:// or https://, not {url!r}",
                code="bad_url",
            )
        if not token or any(c.isspace() for c in token):
            raise NotAuthenticated(
                f"the token from {token_source} is empty or holds white space",
                code="bad_token",
            )
        if max_retries < 0 or timeout <= 0 or max_wait < 0 or backoff < 0:
            raise ValueError("timeout must be positive; max_retries, max_wait, backoff >= 0")
        self.base_url = url
        self.max_retries = max_retries
        self.max_wait = max_wait
        self.backoff = backoff
        self.token_source = token_source
        self._token = token
        self._sleep = sleep
        self._http = httpx.Client(
            base_url=url,
            timeout=timeout,
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            follow_redirects=False,
        )

    def __repr__(self) -> str:
        return f"SimClient({self.base_url!r})"

    def close(self) -> None:
        """Close the client's connections (leaving a `with` block does)."""
        self._http.close()

    def __enter__(self) -> SimClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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
            {execution_status, validity_status, evidence_status, quality_ref, attempt}.

        Raises:
            NoSuchResource: no such run in the token's tenant (404).
            RemoteError: any other refusal, or no answer after the retries.
        """
        return self._read("run status", f"/v1/sim/runs/{_segment(run_id)}")

    def cancel(
        self, run_id: str, *, reason: str, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Ask the service to cancel a run (202): a pending run ends at once, a running one at
        its next step.

        Args:
            run_id: the run's id.
            reason: why, recorded with the cancellation.
            idempotency_key: the key to send (default: a fresh one).

        Returns:
            The service's answer: {execution_status: "cancelled"}.

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
            RemoteError: any other refusal, or no answer after the retries.
        """
        try:
            return self._events_page(run_id, after_seq)
        except CursorExpired as gone:
            snapshot = self.run_status(run_id)
            resume = _resume_cursor(gone.body)
            tried = {after_seq}
            for cursor in (resume, 0):
                if cursor is None or cursor in tried:
                    continue
                tried.add(cursor)
                try:
                    page = self._events_page(run_id, cursor)
                except CursorExpired:
                    continue
                return EventPage(page.events, page.next_seq, snapshot, after_seq)
            raise CursorExpired(
                f"{gone.message}; the service named no newer cursor to resume from",
                status=410,
                code=gone.code,
                body=gone.body,
            ) from None

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
        cursor = after_seq
        ended = False
        while True:
            page = self.events(run_id, cursor)
            if page.snapshot is not None and on_gap is not None:
                on_gap(page)
            fresh = [e for e in page.events if _seq(e) > cursor]
            for event in fresh:
                cursor = max(cursor, _seq(event))
                yield event
            cursor = max(cursor, page.next_seq)
            if fresh:
                continue
            if ended:
                return
            # The service writes a run's last events with its terminal status, so once the
            # status is terminal one more empty page means everything has been read.
            status = self.run_status(run_id)
            if status.get("execution_status") in TERMINAL:
                ended = True
                continue
            self._sleep(poll_interval)

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
            {resolved, manifest_sha256}.

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
        events = data.get("events")
        if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
            raise RemoteError("events: the service's answer has no list of events", code="bad_body")
        # The cursor is the last seq seen, whatever `next_seq` counts from.
        cursor = max([after_seq, *(_seq(e) for e in events)])
        return EventPage(events=events, next_seq=cursor)

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

    def _read(
        self, what: str, path: str, params: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        return _json_object(self._call(what, "GET", path, params=params), what)

    def _write(
        self, what: str, path: str, body: Mapping[str, Any], *, key: str | None
    ) -> dict[str, Any]:
        # One key per logical call, the same on every retry: the service answers a repeat
        # from its record instead of writing twice.
        key = key or str(uuid.uuid4())
        return _json_object(self._call(what, "POST", path, body=body, key=key), what)

    def _call(
        self,
        what: str,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Mapping[str, Any] | None = None,
        key: str | None = None,
    ) -> httpx.Response:
        headers = {"Idempotency-Key": key} if key else {}
        attempts = self.max_retries + 1
        for attempt in range(attempts):
            last = attempt == attempts - 1
            try:
                response = self._http.request(
                    method, path, params=params, json=body, headers=headers
                )
            except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as exc:
                if last:
                    raise ServiceUnavailable(
                        self._clean(
                            f"{what}: no answer from {self.base_url} after {attempts} "
                            f"attempt{'s' if attempts > 1 else ''} "
                            f"({type(exc).__name__}: {exc or 'connection lost'})"
                        )
                        + _key_hint(key),
                        idempotency_key=key,
                        attempts=attempts,
                    ) from None
                self._sleep(self._pause(attempt, None))
                continue
            except httpx.HTTPError as exc:
                raise RemoteError(
                    self._clean(f"{what}: {type(exc).__name__}: {exc}"), idempotency_key=key
                ) from None
            if response.is_success:
                return response
            retry_after = _retry_after(response.headers.get("Retry-After"))
            if response.status_code in _RETRIED and not last:
                wait = self._pause(attempt, retry_after)
                if wait <= self.max_wait:
                    self._sleep(wait)
                    continue
            raise self._error(what, response, retry_after, key, attempt + 1)
        raise AssertionError("unreachable")  # pragma: no cover

    def _pause(self, attempt: int, retry_after: float | None) -> float:
        """Retry-After when the service gave one, else exponential backoff with jitter."""
        if retry_after is not None:
            return retry_after
        return min(self.max_wait, self.backoff * 2.0**attempt) * random.uniform(0.5, 1.0)

    def _error(
        self,
        what: str,
        response: httpx.Response,
        retry_after: float | None,
        key: str | None,
        attempts: int,
    ) -> RemoteError:
        status = response.status_code
        error: dict[str, Any] = self._scrub(_error_object(response))
        code = str(error.get("code") or response.reason_phrase or "error").strip()
        text = str(error.get("message") or "").strip() or response.reason_phrase or "refused"
        message = f"{what}: {status} {code}: {text}"
        cls = _ERRORS.get(status, RemoteError)
        issues: list[dict[str, Any]] = []
        if cls is InvalidRequest:
            issues = _issues(error)
            shown = "; ".join(_issue_line(i) for i in issues[:_MAX_ISSUES_SHOWN])
            if shown:
                message += f" — {shown}"
            if len(issues) > _MAX_ISSUES_SHOWN:
                message += f" (and {len(issues) - _MAX_ISSUES_SHOWN} more)"
            message += "; fix the request and send it anew"
        elif cls is NotAuthenticated:
            message += (
                f"; the token is read from {self.token_source}: "
                "point it at a file holding a token the service knows"
            )
        elif cls is NotPermitted:
            message += (
                f"; the token from {self.token_source} may not act on this tenant or namespace"
            )
        elif cls in (RateLimited, ServiceUnavailable):
            if retry_after is not None and retry_after > self.max_wait:
                message += f" (the service asks to retry after {retry_after:g} s)"
            elif attempts > 1:
                message += f" (gave up after {attempts} attempts)"
            message += _key_hint(key)
        details: dict[str, Any] = {"errors": issues} if cls is InvalidRequest else {}
        return cls(
            self._clean(message),
            status=status,
            code=code,
            body=error,
            retry_after=retry_after,
            idempotency_key=key,
            attempts=attempts,
            **details,
        )

    def _clean(self, text: str) -> str:
        """Text without the token, wherever a server or a library may have echoed it."""
        return redact_secrets(text, [self._token])

    def _scrub(self, value: Any) -> Any:
        """A service's error object with `_clean` applied to every string in it."""
        if isinstance(value, str):
            return self._clean(value)
        if isinstance(value, dict):
            return {self._clean(str(k)): self._scrub(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._scrub(v) for v in value]
        return value


# --------------------------------------------------------------------------- helpers


def load_token(path: str, *, setting: str = TOKEN_SETTING) -> str:
    """The bearer token in a file: its first line, stripped.

    Args:
        path: the token file.
        setting: the option or variable that named the file, for the error.

    Returns:
        The token.

    Raises:
        InputError: the file cannot be read, is not UTF-8 text, or its first line is empty or
            holds white space; it names the file and the setting, never the content.
    """
    from .core.errors import InputError

    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise InputError(
            f"cannot read the token file ({exc.strerror or type(exc).__name__})",
            file=path,
            path=setting,
        ) from None
    except UnicodeDecodeError:
        raise InputError("the token file is not UTF-8 text", file=path, path=setting) from None
    token = text.strip().splitlines()[0].strip() if text.strip() else ""
    if not token or any(c.isspace() for c in token):
        raise InputError(
            "the token file is empty or its first line holds white space",
            file=path,
            path=setting,
        )
    return token


def _segment(value: str) -> str:
    """An id as one URL path segment (no `/`, `?` or `#` can change the route)."""
    from urllib.parse import quote

    return quote(str(value), safe="@-._~")


def _seq(event: Mapping[str, Any]) -> int:
    seq = event.get("seq")
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else -1


def _field(data: Mapping[str, Any], name: str, what: str) -> Any:
    if data.get(name) is None:
        raise RemoteError(f"{what}: the service's answer has no {name}", code="bad_body")
    return data[name]


def _json_object(response: httpx.Response, what: str) -> dict[str, Any]:
    try:
        data = response.json()
    except ValueError:
        raise RemoteError(
            f"{what}: the service answered {response.status_code} with a body that is not JSON",
            status=response.status_code,
            code="bad_body",
        ) from None
    if not isinstance(data, dict):
        raise RemoteError(
            f"{what}: the service answered {response.status_code} with JSON that is not an object",
            status=response.status_code,
            code="bad_body",
        )
    return data


def _error_object(response: httpx.Response) -> dict[str, Any]:
    """The service's `{"error": {...}}`; FastAPI's `{"detail": ...}` and plain text too."""
    try:
        data = response.json()
    except ValueError:
        text = " ".join(response.text.split())[:300]
        return {"message": text} if text else {}
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict):
            return error
        if isinstance(error, str):
            return {"message": error}
        detail = data.get("detail")
        if isinstance(detail, list):
            return {"code": "unprocessable", "message": "invalid request", "issues": detail}
        if isinstance(detail, str):
            return {"message": detail}
    return {}


def _issues(error: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The located problems of a 422 as {path, message, expected}: the service's `issues`
    (or `errors`, `details`), or FastAPI's `loc`/`msg` items."""
    for name in ("issues", "errors", "details", "detail"):
        found = error.get(name)
        if isinstance(found, list):
            break
    else:
        return []
    out = []
    for item in found:
        if not isinstance(item, dict):
            out.append({"path": "", "message": str(item), "expected": None})
            continue
        path = item.get("path", item.get("loc", ""))
        if isinstance(path, list | tuple):
            path = ".".join(str(p) for p in path)
        message = item.get("message", item.get("msg", ""))
        out.append(
            {"path": str(path or ""), "message": str(message), "expected": item.get("expected")}
        )
    return out


def _issue_line(issue: Mapping[str, Any]) -> str:
    text = f"{issue['path']}: " if issue.get("path") else ""
    text += str(issue.get("message") or "invalid")
    if issue.get("expected"):
        text += f" (expected {issue['expected']})"
    return text


def _run_id_of(error: Mapping[str, Any]) -> str | None:
    """The run a 409 on start_run points at, when the service names it."""
    run_id = error.get("run_id")
    return run_id if isinstance(run_id, str) and run_id else None


def _resume_cursor(error: Mapping[str, Any]) -> int | None:
    """Where a 410 says the served events resume: its `next_seq`, the cursor to pass."""
    value = error.get("next_seq")
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def _retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (a number or an HTTP date); None when absent or
    unreadable."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        seconds = when.timestamp() - time.time()
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


def _key_hint(key: str | None) -> str:
    return f"; send it again with Idempotency-Key {key}" if key else ""


__all__ = [
    "TERMINAL",
    "CursorExpired",
    "EventPage",
    "InvalidRequest",
    "MalformedRequest",
    "NoSuchResource",
    "NotAuthenticated",
    "NotPermitted",
    "RateLimited",
    "RemoteError",
    "ServiceUnavailable",
    "SimClient",
    "StartedRun",
    "StateConflict",
    "load_token",
]
