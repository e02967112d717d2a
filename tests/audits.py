"""Audits as audit.json holds them, for tests that build one with `analyse` and no directory:
`analyse_dir` adds the build's provenance beside `analyse`'s output, and readers of audit.json
(the report) check the whole document."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PROVENANCE: dict[str, Any] = {
    "planHash": "ab" * 32,
    "kernelFingerprints": [],
    "models": [],
    "providers": [],
    "decisions": [],
    "conditions": {},
}
"""What `analyse_dir` adds beside `analyse`'s output, for audits built without a directory."""


def with_provenance(audit: Mapping[str, Any]) -> dict[str, Any]:
    """`audit` with the provenance an audit directory would have given it."""
    return {**audit, "provenance": PROVENANCE}
