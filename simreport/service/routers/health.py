"""GET /healthz and GET /metrics, which answer without a token: whether the API's workers run
and the queue moves (503 when degraded), and the service's counts for Prometheus."""

from fastapi import APIRouter
from starlette.responses import JSONResponse, Response

from .. import queue
from ..dependencies import Service, Shared
from ..metrics import CONTENT_TYPE, exposition
from ..models import Health, HealthReason, QueueHealth, WorkerCount

router = APIRouter(tags=["service"])


@router.get(
    "/healthz",
    response_model=Health,
    responses={503: {"model": Health, "description": "degraded, or the ledger did not answer"}},
)
def healthz(service: Shared) -> Response:
    health = _health(service)
    return JSONResponse(health.model_dump(), status_code=200 if health.status == "ok" else 503)


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE: {}}, "description": "Prometheus' text format"}},
)
def metrics(service: Shared) -> Response:
    """Runs by status, queue depth, claim-to-finish times, ledger errors, workers and their
    restarts, and the process' CPU and memory, for Prometheus."""
    return Response(exposition(service.registry), media_type=CONTENT_TYPE)


def _health(service: Service) -> Health:
    """The API's workers and the queue, degraded when a worker is missing or the oldest pending
    run has waited past --max-pending-age. A ledger that does not answer raises (503)."""

    state = queue.queue_state(service.engine)
    pool = service.pool
    asked, alive = (0, 0) if pool is None else (pool.asked, pool.alive())
    waited = None
    if state.oldest_pending_at is not None:
        waited = round(max(0.0, (service.clock() - state.oldest_pending_at).total_seconds()), 3)
    reasons = []
    if alive < asked:
        reasons.append(
            HealthReason(
                code="worker_missing",
                message=f"{asked - alive} of {asked} worker(s) not running: being started again",
            )
        )
    limit = service.settings.max_pending_age_seconds
    if limit and waited is not None and waited > limit:
        reasons.append(
            HealthReason(
                code="pending_too_long",
                message=f"the oldest pending run has waited {waited:.0f} s, longer than "
                f"--max-pending-age ({limit:g} s)",
            )
        )
    return Health(
        status="degraded" if reasons else "ok",
        workers=WorkerCount(alive=alive, asked=asked),
        queue=QueueHealth(
            depth=state.pending, running=state.running, oldest_pending_seconds=waited
        ),
        reasons=reasons,
    )
