"""Re-locking an edited run folder: after a test edits a testbed run's files on purpose (another
asset digest, numbers the json module must decode), `relock` makes every digest the run
records agree with the files again, as a run that had written them would have. What the
checks of the digests catch is exactly what was edited without this."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from simreport.core.canonical import sha256_bytes
from simreport.core.run_digests import (
    LAYER_FILES,
    LAYER_SHA256,
    MANIFEST_LOCKED,
    RECORDS_FILE,
    locked_manifest_sha256,
    records_sha256,
)
from simreport.kernel.testbed.records import record_digest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "refund_desk"


def load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def save(path: Path, doc: Any) -> None:
    path.write_text(json.dumps(doc, indent=2), encoding="utf-8")


def refund_run(out: Path) -> Path:
    """A run of the refund desk's example scenario in `out` (no ledger)."""
    from simreport.cli import main
    from simreport.core.errors import EXIT_OK

    assert (
        main(["run", str(EXAMPLE / "scenario.yaml"), "--out", str(out), "--no-ledger"]) == EXIT_OK
    )
    return out


def relock(run: Path) -> None:
    """Recompute the run's manifestSha256, the manifest its records locked (and those records'
    sha256), and every layer digest of its manifest."""
    manifest = load(run / "manifest.json")
    manifest["manifestSha256"] = locked_manifest_sha256(manifest)
    lines = (run / RECORDS_FILE).read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    for record in records:
        if record["type"] == MANIFEST_LOCKED:
            record["payload"]["manifestSha256"] = manifest["manifestSha256"]
            record["sha256"] = record_digest(record)
    (run / RECORDS_FILE).write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8"
    )
    digests = dict(manifest.get(LAYER_SHA256) or {})
    digests[RECORDS_FILE] = records_sha256(r["sha256"] for r in records)
    for name in LAYER_FILES[1:]:
        if name in digests and (run / name).is_file():
            digests[name] = sha256_bytes((run / name).read_bytes())
    manifest[LAYER_SHA256] = digests
    (run / "manifest.json").write_text(json.dumps(manifest, indent=2), encoding="utf-8")
