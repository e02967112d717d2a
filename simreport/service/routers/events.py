"""GET /runs/{id}/events: a run's events after a cursor, as the ledger holds them (410 for a
cursor before the retention window: re-read the snapshot; 422 `cursor_past_end` for one past
the run's last event, with the cursor to use instead)."""

from typing import Annotated

from fastapi import APIRouter, Query
from starlette.responses import Response

from ...core.values import INT64_MAX
from .. import queue
from ..auth import check_namespace
from ..dependencies import Authenticated, Id, Shared
from ..models import READ_REFUSALS, EventPage, refusals

router = APIRouter(tags=["runs"])


@router.get(
    "/runs/{run_id}/events",
    response_model=EventPage,
    responses=refusals(*READ_REFUSALS, 410, 422),
)
def get_events(
    run_id: Id,
    principal: Authenticated,
    service: Shared,
    after_seq: Annotated[
        int,
        Query(ge=0, le=INT64_MAX, description="the last seq already read (0: from the start)"),
    ] = 0,
    limit: Annotated[int, Query(ge=1, le=1000, description="at most this many events")] = 500,
) -> Response:
    check_namespace(service.engine, principal, "run", run_id)
    page = queue.events_page(
        service.engine,
        run_id,
        after_seq,
        tenant=principal.tenant,
        limit=limit,
        retention_seconds=service.settings.events_retention_seconds,
    )
    return Response(page, media_type="application/json")
