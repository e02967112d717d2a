"""Where the verbs record what they wrote: the ledger a `ledger` argument names, resolved once
per call, and closed (with what it could not record raised) by the call that made it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..ledger.recording import LedgerRecorder


def ledger_recorder(
    ledger: LedgerRecorder | str | bool, results_dir: Path
) -> tuple[LedgerRecorder, bool]:
    """Where `run`, `audit` and `analyse` record what they wrote: `ledger` True (the default) is
    the ledger $SIMREPORT_LEDGER_URL names, else `ledger.sqlite` in `results_dir`, the folder
    that holds the output; a string is a URL; False records nothing; a LedgerRecorder is the
    caller's (it reads its `problems`). Returns the recorder and whether this call owns it (then
    it closes it, and raises LedgerIncomplete when something was not recorded). A URL that
    cannot be one is refused here, before anything runs."""
    from ..ledger.recording import LedgerRecorder

    if isinstance(ledger, LedgerRecorder):
        return ledger, False
    if isinstance(ledger, str):
        return LedgerRecorder.resolve(ledger, results_dir=results_dir), True
    return LedgerRecorder.resolve(results_dir=results_dir, enabled=bool(ledger)), True


def finish_recording(recorder: LedgerRecorder, owned: bool) -> None:
    """Close a recorder this call made, raising LedgerIncomplete for what it did not record."""
    if owned:
        recorder.close()
        recorder.raise_if_incomplete()
