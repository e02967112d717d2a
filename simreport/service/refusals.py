"""Every refusal of the run service as an HTTP answer, decided here and nowhere else: one shape,
`{"error": {"code", "message", …}}` (`error_response`), and one function that answers whatever
a route raised (`answer`), with the status `errors.STATUS` gives each refusal (409 read the
state, 410 re-read the snapshot, 422 fix and recreate, 429 and 503 with Retry-After)."""

import logging
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse, Response

from ..core.validation import expectation, nearest
from ..ledger.db import DISK_FULL, unavailability
from .dependencies import IDEMPOTENCY_HEADER, missing_key
from .errors import ServiceError

log = logging.getLogger("simreport.service")


def error_response(
    status: int,
    code: str,
    message: str,
    *,
    retry_after: float | None = None,
    headers: Mapping[str, str] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> JSONResponse:
    """The one shape of every refusal: `{"error": {"code", "message", …}}`, with Retry-After
    (whole seconds) when the client should come back."""
    out = dict(headers or {})
    if retry_after is not None:
        out["Retry-After"] = str(max(1, round(retry_after)))
    if status in (429, 503) and "Retry-After" not in out:
        out["Retry-After"] = "1"
    error = {"code": code, "message": message, **(extra or {})}
    return JSONResponse({"error": error}, status_code=status, headers=out)


def install(app: FastAPI) -> None:
    """Answer whatever the routes raise with `answer`."""
    for raised in (
        ServiceError,
        RequestValidationError,
        HTTPException,
        sa.exc.DBAPIError,
        Exception,
    ):
        app.exception_handler(raised)(answer)


def answer(request: Request, exc: Exception) -> Response:
    """The one answer to what a route raised: a refusal with the status `errors.STATUS` gives
    it (401 with its challenge, 429 and 503 with Retry-After); a request FastAPI could not read
    as its models say, 400 without an Idempotency-Key and 422 otherwise, naming every issue; 404
    and 405 for what routes nothing; 503 while the ledger does not answer or its disk is full
    (retry with the same key); and 500 for anything else, which is the service's fault."""
    if isinstance(exc, ServiceError):
        return refusal(exc)
    if isinstance(exc, RequestValidationError):
        return _invalid(request, exc)
    if isinstance(exc, HTTPException):
        codes = {404: "not_found", 405: "method_not_allowed"}
        message = "no such endpoint" if exc.status_code == 404 else str(exc.detail)
        return error_response(
            exc.status_code,
            codes.get(exc.status_code, "http_error"),
            message,
            headers=dict(exc.headers or {}),
        )
    if isinstance(exc, sa.exc.DBAPIError):
        return _ledger_down(exc, request.app.state.service.settings.retry_after_seconds)
    # Starlette raises it again after this answer, and uvicorn logs it with its traceback.
    return error_response(500, "internal", "internal error")


def refusal(error: ServiceError) -> JSONResponse:
    """The answer to `error`: its status (`errors.STATUS`), code, message and fields."""
    status = error.status
    body = error.body()
    return error_response(
        status,
        body.pop("code"),
        body.pop("message"),
        retry_after=error.retry_after,
        headers={"WWW-Authenticate": "Bearer"} if status == 401 else None,
        extra=body,
    )


def _invalid(request: Request, exc: RequestValidationError) -> Response:
    if any(tuple(e.get("loc", ())) == ("header", IDEMPOTENCY_HEADER) for e in exc.errors()):
        return refusal(missing_key())
    issues = request_issues(exc.errors(), _body_model(request.scope.get("route")))
    first = issues[0]
    message = (f"{first['path']}: " if first["path"] else "") + str(first["message"])
    if len(issues) > 1:
        message += f" (and {len(issues) - 1} more)"
    return error_response(422, "invalid_request", message, extra={"issues": issues})


def _ledger_down(exc: sa.exc.DBAPIError, retry_after: float) -> Response:
    cause = unavailability(exc)
    if cause is None:  # the database refused the statement: ours to fix, not the client's
        log.error("the ledger refused a statement", exc_info=exc)
        return error_response(500, "internal", "internal error")
    if cause == DISK_FULL:
        code, message = "ledger_disk_full", "the ledger's disk is full"
    else:
        code, message = "ledger_unavailable", "the ledger did not answer"
    log.warning("%s: %s", message, type(exc.orig).__name__)
    return error_response(
        503, code, f"{message}: retry with the same Idempotency-Key", retry_after=retry_after
    )


def _body_model(route: Any) -> type[BaseModel] | None:
    """The model of the body `route` takes (None: it takes none), for the keys an unknown
    key's error lists."""
    field = getattr(route, "body_field", None)
    model = getattr(getattr(field, "field_info", None), "annotation", None)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def request_issues(errors: Any, model: type[BaseModel] | None) -> list[dict[str, str | None]]:
    """FastAPI's validation errors as located issues: the dotted path inside the body (or
    `query.NAME`, `header.NAME`), a message and what was expected there."""
    issues: list[dict[str, str | None]] = []
    for error in errors:
        loc = [str(p) for p in error.get("loc", ())]
        where, rest = (loc[0], loc[1:]) if loc else ("body", [])
        path = ".".join(rest) if where == "body" else ".".join(loc)
        kind = error.get("type", "")
        message = str(error.get("msg", "invalid"))
        expected = expectation(kind)
        if kind == "extra_forbidden":
            message = f"unknown key {rest[-1]!r}" if rest else "unknown key"
            if model is not None and len(rest) == 1:
                known = sorted(model.model_fields)
                expected = "one of " + ", ".join(known)
                meant = nearest(rest[-1], known)
                if meant is not None:
                    expected += f"; did you mean {meant}?"
        elif kind == "missing":
            message = f"missing required key {rest[-1]!r}" if rest else "the body is missing"
            expected = "this key to be present" if rest else "a JSON object"
        elif kind == "json_invalid":
            message, expected = "the body is not valid JSON", "a JSON object"
        elif kind == "literal_error":
            expected = (error.get("ctx") or {}).get("expected")
        elif kind in ("model_attributes_type", "dict_type", "model_type"):
            expected = "a JSON object"
        issues.append({"path": path, "message": message, "expected": expected})
    return issues or [{"path": "", "message": "invalid request", "expected": None}]
