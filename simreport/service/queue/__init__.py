"""The run service's state, all of it in the ledger: scenarios and versions, queued runs with
frozen manifests and leases, their events, what they recorded, and every Idempotency-Key. Every
function takes an Engine and raises a ServiceError for what the caller asked wrongly; the
modules, one job each, are listed in docs/service.md."""

from ..errors import Conflict, Gone, LeaseLost, NotFound, ServiceError, Unprocessable
from .idempotency import IdempotencyKey, Stored, StoredAnswer, idempotent, remember
from .leases import (
    CONFIRM_MIN_SECONDS,
    Claim,
    Heartbeat,
    Reclaimed,
    claim,
    confirmation_seconds,
    heartbeat,
    reclaim_expired,
)
from .manifests import get_manifest, operator_resources, refuse_unrunnable
from .reads import events_after, events_page, evidence, get_run, run_detail
from .recording import append_events, fail, finish
from .runs import (
    CANCEL_CHANNEL,
    CANCELLING,
    Capacity,
    cancellations,
    count_active,
    request_cancel,
    start_run,
)
from .scenarios import REVIEW_ACTIONS, create_scenario, review_version, run_document, submit_version
from .statistics import (
    CLAIM_TO_FINISH_BUCKETS,
    Durations,
    QueueState,
    RunStatistics,
    queue_state,
    run_statistics,
)

__all__ = [
    "CANCELLING",
    "CANCEL_CHANNEL",
    "CLAIM_TO_FINISH_BUCKETS",
    "CONFIRM_MIN_SECONDS",
    "REVIEW_ACTIONS",
    "Capacity",
    "Claim",
    "Conflict",
    "Durations",
    "Gone",
    "Heartbeat",
    "IdempotencyKey",
    "LeaseLost",
    "NotFound",
    "QueueState",
    "Reclaimed",
    "RunStatistics",
    "ServiceError",
    "Stored",
    "StoredAnswer",
    "Unprocessable",
    "append_events",
    "cancellations",
    "claim",
    "confirmation_seconds",
    "count_active",
    "create_scenario",
    "events_after",
    "events_page",
    "evidence",
    "fail",
    "finish",
    "get_manifest",
    "get_run",
    "heartbeat",
    "idempotent",
    "operator_resources",
    "queue_state",
    "reclaim_expired",
    "refuse_unrunnable",
    "remember",
    "request_cancel",
    "review_version",
    "run_detail",
    "run_document",
    "run_statistics",
    "start_run",
    "submit_version",
]
