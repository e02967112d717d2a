"""The audit every page reads: audit.json checked once against its model (`AuditDoc`) where it
enters the report — the file read, or the mapping `analyse` returns — so the pages read
attributes, and a renamed or missing key is refused here with its path rather than shown as a
blank cell. An audit of an older schema is refused with the command that rewrites it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..analysis.audit_document import AUDIT_SCHEMA_VERSION, AuditDoc, validate_audit
from ..core.errors import InputError
from ..core.files import load_document


def audit_document(audit: AuditDoc | Mapping[str, Any], *, file: Path | None = None) -> AuditDoc:
    """The audit the pages read, checked against its model (`AuditDoc`).

    An audit.json of an older schema is refused with what to do instead: the pages read only
    the current contract, and `simreport analyse` rewrites the audit from its runs. A key the
    model does not know, or one it lacks, is a SchemaError naming it (both exit code 2)."""
    if isinstance(audit, AuditDoc):
        return audit
    version = audit.get("schemaVersion")
    if version != AUDIT_SCHEMA_VERSION:
        folder = file.parent if file is not None else "<dir>"
        raise InputError(
            f"audit.json of schema {version}: the report reads schema {AUDIT_SCHEMA_VERSION}",
            file=file,
            path="schemaVersion",
            expected=f"an audit written by this version; re-run `simreport analyse {folder}`",
        )
    return validate_audit(audit, file=file)


def read_audit_document(audit_file: str | Path) -> AuditDoc:
    """Read an audit directory's audit.json and check it against its model (`audit_document`).

    Args:
        audit_file: the audit.json.

    Returns:
        The audit, read by attribute.

    Raises:
        InputError: the file cannot be read, is not an audit, or is of an older schema.
        SchemaError: the audit breaks its contract (a key renamed or missing).
    """
    path = Path(audit_file)
    # Strings in audit.json may carry control characters: every one printed is made visible.
    data = load_document(path, allow_control_characters=True).data
    if not isinstance(data, dict) or "plan" not in data or "schemaVersion" not in data:
        raise InputError(
            "not an audit document", file=path, expected="audit.json written by analyse"
        )
    return audit_document(data, file=path)
