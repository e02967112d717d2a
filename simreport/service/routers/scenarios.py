"""POST /scenarios, /scenarios/{id}/versions and /scenarios/{id}/versions/{version}:{action}:
scenarios, their versions, and the review steps of `simreport review`."""

from typing import Any, Literal

from fastapi import APIRouter
from starlette.responses import Response

from .. import queue
from ..auth import check_namespace, forbidden_namespace
from ..dependencies import Authenticated, Id, Shared, Write
from ..models import (
    WRITE_REFUSALS,
    ReviewRequest,
    ScenarioCreated,
    ScenarioRequest,
    VersionRequest,
    VersionReviewed,
    VersionSubmitted,
    refusals,
)

router = APIRouter(tags=["scenarios"])


@router.post(
    "/scenarios",
    status_code=201,
    response_model=ScenarioCreated,
    responses=refusals(400, 401, 403, 409, 422, 503),
)
def create_scenario(
    body: ScenarioRequest, principal: Authenticated, service: Shared, write: Write
) -> Response:
    if not principal.may_use(body.namespace):
        raise forbidden_namespace(principal, body.namespace)

    def create(idempotency: queue.IdempotencyKey) -> dict[str, Any]:
        scenario_id = queue.create_scenario(
            service.engine,
            tenant=principal.tenant,
            namespace=body.namespace,
            name=body.name,
            owner=body.owner,
            risk_level=body.risk_level,
            idempotency=idempotency,
        )
        return {"scenario_id": scenario_id}

    return write(body, create)


@router.post(
    "/scenarios/{scenario_id}/versions",
    status_code=202,
    response_model=VersionSubmitted,
    responses=refusals(*WRITE_REFUSALS),
)
def submit_version(
    scenario_id: Id,
    body: VersionRequest,
    principal: Authenticated,
    service: Shared,
    write: Write,
) -> Response:
    check_namespace(service.engine, principal, "scenario", scenario_id)

    def submit(idempotency: queue.IdempotencyKey) -> dict[str, Any]:
        status = queue.submit_version(
            service.engine,
            tenant=principal.tenant,
            scenario_id=scenario_id,
            version=body.version,
            spec=body.spec,
            source=body.source,
            created_by=principal.name,
            idempotency=idempotency,
            policy=service.policy,
            library=service.settings.library_dir,
        )
        return {"status": status}

    return write(body, submit)


@router.post(
    "/scenarios/{scenario_id}/versions/{version}:{action}",
    response_model=VersionReviewed,
    responses=refusals(*WRITE_REFUSALS),
)
def review_version(
    scenario_id: Id,
    version: Id,
    action: Literal["submit", "approve", "publish", "retire"],
    body: ReviewRequest,
    principal: Authenticated,
    service: Shared,
    write: Write,
) -> Response:
    """One review step (`simreport review submit|approve|publish|retire`), recorded with
    the token's name as the reviewer."""
    check_namespace(service.engine, principal, "scenario", scenario_id)

    def review(idempotency: queue.IdempotencyKey) -> dict[str, Any]:
        status = queue.review_version(
            service.engine,
            tenant=principal.tenant,
            scenario_id=scenario_id,
            version=version,
            action=action,
            reviewer=principal.name,
            note=body.note,
            risk_signoff=body.risk_signoff,
            idempotency=idempotency,
        )
        return {"status": status}

    return write(body, review)
