"""The append-only event log of one run: facts with a sequence number, logical and wall time."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core.canonical import to_plain
from ..core.files import write_atomic
from ..core.redaction import Scrubber


class EventLog:
    """Collects events in memory and writes events.jsonl once, atomically, at the end of a run.

    `wall` is the only clock reading in a run directory's files besides the manifest's none: tools
    comparing runs byte for byte leave it out.
    """

    def __init__(
        self,
        *,
        keep: bool = True,
        listener: Callable[[dict[str, Any]], None] | None = None,
        scrubber: Scrubber | None = None,
    ) -> None:
        """`listener` is handed each event as it is emitted (a service streams them on); it must
        not raise, and it never changes what is written. `scrubber`: secrets blanked out of
        every payload before the event is kept or handed on."""
        self.scrubber = scrubber if scrubber else None
        self._lines: list[str] = []
        self._seq = 0
        self.content_bytes = 0
        """UTF-8 bytes of the lines kept, without their real-clock readings (`wall`, a payload's
        `durationNs`): the same on every rerun of the same run (cost's `recordBytes`)."""
        self.keep = keep
        self.listener = listener

    def emit(self, type_: str, actor: str | int | None, t: int, payload: dict[str, Any]) -> None:
        self._seq += 1
        if not self.keep:
            return
        record = {
            "seq": self._seq,
            "type": type_,
            "actor": actor,
            "t": t,
            "wall": round(time.time(), 6),
            "payload": to_plain(payload),
        }
        line = json.dumps(record, separators=(",", ":"), ensure_ascii=False)
        if self.scrubber is not None and self.scrubber.found(line):
            record["payload"] = self.scrubber.document(record["payload"])
            line = json.dumps(record, separators=(",", ":"), ensure_ascii=False)
        self._lines.append(line)
        clock = len(f'"wall":{json.dumps(record["wall"])},')
        duration = record["payload"].get("durationNs")
        if duration is not None:
            clock += len(f',"durationNs":{json.dumps(duration)}')
        self.content_bytes += len(line.encode()) + 1 - clock  # + 1: the newline written
        if self.listener is not None:
            self.listener(record)

    @property
    def count(self) -> int:
        return self._seq

    def write(self, path: Path) -> None:
        write_atomic(path, "".join(line + "\n" for line in self._lines))
