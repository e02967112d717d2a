"""GET /assets, /assets/{type}/{name}/versions and /assets/{type}/{name}/versions/{version}, POST
/assets/{type}/{name}/versions/{version}:{action}: the review of asset versions, as for scenario
versions. An asset's name may hold slashes (`env/ecom-seed`). Assets belong to the tenant: any
of its tokens reads them, and only a token of all its namespaces reviews them."""

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from starlette.responses import JSONResponse, Response

from ...core.values import Name
from .. import queue
from ..auth import Principal
from ..dependencies import Authenticated, Id, Shared, Write
from ..errors import Forbidden
from ..models import (
    MAX_TEXT,
    READ_REFUSALS,
    WRITE_REFUSALS,
    AssetType,
    AssetVersionDetail,
    AssetVersionList,
    ReviewRequest,
    ReviewStatus,
    VersionReviewed,
    refusals,
)
from ..queue.assets import asset_version, asset_versions, review_asset_version

router = APIRouter(tags=["assets"])

VERSION_PATH = "/assets/{asset_type}/{name:path}/versions/{version}"


@router.get("/assets", response_model=AssetVersionList, responses=refusals(*READ_REFUSALS, 422))
def list_assets(
    principal: Authenticated,
    service: Shared,
    asset_type: Annotated[AssetType | None, Query(description="only assets of this type")] = None,
    name: Annotated[
        Name | None, Query(max_length=MAX_TEXT, description="only assets of this name")
    ] = None,
    status: Annotated[ReviewStatus | None, Query(description="only versions in it")] = None,
) -> Response:
    """Every asset version of the token's tenant the ledger holds (of `asset_type`, named
    `name`, in `status`, when given), with its review status and last review step."""
    return JSONResponse(
        asset_versions(
            service.engine,
            tenant=principal.tenant,
            asset_type=asset_type,
            name=name,
            status=status,
        )
    )


@router.get(
    "/assets/{asset_type}/{name:path}/versions",
    response_model=AssetVersionList,
    responses=refusals(*READ_REFUSALS, 422),
)
def list_versions(
    asset_type: AssetType,
    name: Id,
    principal: Authenticated,
    service: Shared,
    status: ReviewStatus | None = None,
) -> Response:
    """The asset's versions (in `status`, when given) with their review status and last
    review step; empty for an asset the ledger does not hold."""
    return JSONResponse(
        asset_versions(
            service.engine,
            tenant=principal.tenant,
            asset_type=asset_type,
            name=name,
            status=status,
        )
    )


@router.get(VERSION_PATH, response_model=AssetVersionDetail, responses=refusals(*READ_REFUSALS))
def show_version(
    asset_type: AssetType, name: Id, version: Id, principal: Authenticated, service: Shared
) -> Response:
    """One asset version's review: its authors and every step."""
    return JSONResponse(
        asset_version(
            service.engine,
            tenant=principal.tenant,
            asset_type=asset_type,
            name=name,
            version=version,
        )
    )


@router.post(
    VERSION_PATH + ":{action}",
    response_model=VersionReviewed,
    responses=refusals(*WRITE_REFUSALS),
)
def review_version(
    asset_type: AssetType,
    name: Id,
    version: Id,
    action: Literal["submit", "approve", "publish", "retire"],
    body: ReviewRequest,
    principal: Authenticated,
    service: Shared,
    write: Write,
) -> Response:
    """One review step on an asset version, recorded with the token's name as the reviewer.
    By default the version's author (who recorded or submitted it) may not approve or publish
    it (403 `self_approval`); the operator's policy file may allow it
    (`review.assetSelfApproval`)."""
    _check_all_namespaces(principal)

    def review(idempotency: queue.IdempotencyKey) -> dict[str, Any]:
        status = review_asset_version(
            service.engine,
            tenant=principal.tenant,
            asset_type=asset_type,
            name=name,
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


def _check_all_namespaces(principal: Principal) -> None:
    """An asset version serves every namespace of its tenant: a token limited to some may not
    review it (403)."""
    if principal.namespaces is not None:
        raise Forbidden(
            f"the token {principal.name!r} may use only some namespaces, and asset versions are "
            "shared by all of its tenant's: review them with a token of every namespace",
            code="forbidden",
        )
