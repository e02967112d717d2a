"""POST /scenarios, /scenarios/{id}/versions and /scenarios/{id}/versions/{version}:{action}:
scenarios, their versions, and the review steps of `simreport review`; GET
/scenarios/{id}/versions and /scenarios/{id}/versions/{version}: their review read back."""

from typing import Any, Literal

from fastapi import APIRouter
from starlette.responses import JSONResponse, Response

from .. import queue
from ..auth import check_namespace, forbidden_namespace
from ..dependencies import Authenticated, Id, Shared, Write
from ..models import (
    READ_REFUSALS,
    WRITE_REFUSALS,
    ReviewRequest,
    ReviewStatus,
    ScenarioCreated,
    ScenarioRequest,
    ScenarioVersionDetail,
    ScenarioVersionList,
    VersionRequest,
    VersionReviewed,
    VersionSubmitted,
    refusals,
)
from ..queue.scenarios import scenario_version, scenario_versions

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
    the token's name as the reviewer, and as the signer of its risk sign-off. By default a
    version's author (who submitted it) may not approve or publish it (403 `self_approval`);
    the operator's policy file may allow it per risk level (`review.selfApproval`)."""
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
            risk_signoff=None if body.risk_signoff is None else body.risk_signoff.sha256,
            policy=service.policy.review,
            idempotency=idempotency,
            at=service.clock(),
        )
        return {"status": status}

    return write(body, review)


@router.get(
    "/scenarios/{scenario_id}/versions",
    response_model=ScenarioVersionList,
    responses=refusals(*READ_REFUSALS, 422),
)
def list_versions(
    scenario_id: Id, principal: Authenticated, service: Shared, status: ReviewStatus | None = None
) -> Response:
    """The scenario's versions (in `status`, when given) with their review status and last
    review step."""
    check_namespace(service.engine, principal, "scenario", scenario_id)
    return JSONResponse(
        scenario_versions(
            service.engine, tenant=principal.tenant, scenario_id=scenario_id, status=status
        )
    )


@router.get(
    "/scenarios/{scenario_id}/versions/{version}",
    response_model=ScenarioVersionDetail,
    responses=refusals(*READ_REFUSALS),
)
def show_version(
    scenario_id: Id, version: Id, principal: Authenticated, service: Shared
) -> Response:
    """One version's review: its authors and every step, each risk sign-off with its signer,
    time and the sha256 it covers."""
    check_namespace(service.engine, principal, "scenario", scenario_id)
    return JSONResponse(
        scenario_version(
            service.engine, tenant=principal.tenant, scenario_id=scenario_id, version=version
        )
    )
