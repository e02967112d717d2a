"""GET /manifests/{id}: the frozen composition a run executes."""

from fastapi import APIRouter
from starlette.responses import JSONResponse, Response

from .. import queue
from ..auth import check_namespace
from ..dependencies import Authenticated, Id, Shared
from ..models import READ_REFUSALS, ManifestView, refusals

router = APIRouter(tags=["manifests"])


@router.get(
    "/manifests/{manifest_id}", response_model=ManifestView, responses=refusals(*READ_REFUSALS)
)
def get_manifest(manifest_id: Id, principal: Authenticated, service: Shared) -> Response:
    check_namespace(service.engine, principal, "manifest", manifest_id)
    return JSONResponse(queue.get_manifest(service.engine, manifest_id, tenant=principal.tenant))
