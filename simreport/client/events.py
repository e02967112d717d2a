"""Pages of a run's events (`EventPage`): read from the service's answer, resumed from the run's
snapshot when a cursor has expired (410), and followed until the run has ended and its last
events are read. The calls that fetch a page or a status are the caller's; this module only
decides which to make and what the pages mean."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import CursorExpired, RemoteError

TERMINAL = frozenset({"completed", "crashed", "cancelled"})
"""Execution statuses a run never leaves."""


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


def page_of(data: Mapping[str, Any], after_seq: int) -> EventPage:
    """The page in the service's answer to a read after `after_seq`.

    Raises:
        RemoteError: the answer holds no list of events.
    """
    events = data.get("events")
    if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
        raise RemoteError("events: the service's answer has no list of events", code="bad_body")
    # The cursor is the last seq seen, whatever `next_seq` counts from.
    cursor = max([after_seq, *(_seq(e) for e in events)])
    return EventPage(events=events, next_seq=cursor)


def read_page(
    page: Callable[[int], EventPage], status: Callable[[], dict[str, Any]], after_seq: int
) -> EventPage:
    """The page after `after_seq`, read with `page`; after a 410, the run's `status` and the
    page from the oldest cursor still served (the 410's hint, else the start).

    Raises:
        CursorExpired: the cursor expired and no newer one could be read.
    """
    try:
        return page(after_seq)
    except CursorExpired as gone:
        snapshot = status()
        resume = _resume_cursor(gone.body)
        tried = {after_seq}
        for cursor in (resume, 0):
            if cursor is None or cursor in tried:
                continue
            tried.add(cursor)
            try:
                resumed = page(cursor)
            except CursorExpired:
                continue
            return EventPage(resumed.events, resumed.next_seq, snapshot, after_seq)
        raise CursorExpired(
            f"{gone.message}; the service named no newer cursor to resume from",
            status=410,
            code=gone.code,
            body=gone.body,
        ) from None


def follow(
    pages: Callable[[int], EventPage],
    status: Callable[[], dict[str, Any]],
    after_seq: int,
    *,
    poll_interval: float,
    sleep: Callable[[float], None],
    on_gap: Callable[[EventPage], None] | None,
) -> Iterator[dict[str, Any]]:
    """Every event after `after_seq`, read with `pages`, each once, until the run's `status` is
    terminal and one more page brings nothing new; `sleep(poll_interval)` while nothing comes,
    and `on_gap` told of a page that resumed from the snapshot."""
    cursor = after_seq
    ended = False
    while True:
        page = pages(cursor)
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
        if status().get("execution_status") in TERMINAL:
            ended = True
            continue
        sleep(poll_interval)


def _seq(event: Mapping[str, Any]) -> int:
    seq = event.get("seq")
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else -1


def _resume_cursor(error: Mapping[str, Any]) -> int | None:
    """Where a 410 says the served events resume: its `next_seq`, the cursor to pass."""
    value = error.get("next_seq")
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None
