"""POST /runs, GET /runs/{id}, GET /runs/{id}/evidence and POST /runs/{id}:cancel: runs queued
with a frozen manifest, their statuses, their evidence once ended, and their cancellation."""

from typing import Annotated, Any

from fastapi import APIRouter, Query
from starlette.responses import JSONResponse, Response

from ...core.values import Name
from .. import queue
from ..auth import check_namespace
from ..dependencies import Authenticated, Id, Shared, Write
from ..models import (
    MAX_TEXT,
    READ_REFUSALS,
    WRITE_REFUSALS,
    CancelRequest,
    EvidencePackage,
    RunCancelled,
    RunRequest,
    RunStarted,
    RunStatus,
    refusals,
)

router = APIRouter(tags=["runs"])


@router.post(
    "/runs",
    status_code=202,
    response_model=RunStarted,
    responses=refusals(*WRITE_REFUSALS, 429),
)
def start_run(
    body: RunRequest, principal: Authenticated, service: Shared, write: Write
) -> Response:
    check_namespace(service.engine, principal, "scenario", body.scenario_id)
    settings = service.settings

    def start(idempotency: queue.IdempotencyKey) -> dict[str, Any]:
        run_id, manifest_id = queue.start_run(
            service.engine,
            tenant=principal.tenant,
            principal=principal.name,
            scenario_id=body.scenario_id,
            version=body.version,
            mode=body.mode,
            seed=body.seed,
            budget=body.budget,
            purpose=body.purpose,
            library=settings.library_dir,
            idempotency=idempotency,
            capacity=service.capacity(principal),
            retries=settings.retry_lost_runs,
            policy=service.policy,
        )
        return {"run_id": run_id, "manifest_id": manifest_id}

    return write(body, start)


@router.get("/runs/{run_id}", response_model=RunStatus, responses=refusals(*READ_REFUSALS))
def get_run(run_id: Id, principal: Authenticated, service: Shared) -> Response:
    check_namespace(service.engine, principal, "run", run_id)
    return JSONResponse(queue.get_run(service.engine, run_id, tenant=principal.tenant))


@router.get(
    "/runs/{run_id}/evidence",
    response_model=EvidencePackage,
    responses=refusals(*READ_REFUSALS, 409, 422),
)
def get_evidence(
    run_id: Id,
    principal: Authenticated,
    service: Shared,
    criterion: Annotated[
        Name | None, Query(max_length=MAX_TEXT, description="only this criterion")
    ] = None,
) -> Response:
    check_namespace(service.engine, principal, "run", run_id)
    package = queue.evidence(service.engine, run_id, tenant=principal.tenant, criterion=criterion)
    return JSONResponse(package)


@router.post(
    "/runs/{run_id}:cancel",
    status_code=202,
    response_model=RunCancelled,
    responses=refusals(*WRITE_REFUSALS),
)
def cancel_run(
    run_id: Id, body: CancelRequest, principal: Authenticated, service: Shared, write: Write
) -> Response:
    check_namespace(service.engine, principal, "run", run_id)

    def cancel(idempotency: queue.IdempotencyKey) -> dict[str, Any]:
        status = queue.request_cancel(
            service.engine, run_id, body.reason, tenant=principal.tenant, idempotency=idempotency
        )
        return {"execution_status": status}

    return write(body, cancel)
