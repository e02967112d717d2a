"""What changed between two builds of an audit, and why.

The analysis keeps each audit a new build replaces in `<audit dir>/history/` (see
`simreport.analysis.provenance`). This module reads them back, compares two audits (grade,
conditions whose significance or direction moved, new and removed conditions) and names the
recorded facts that differ between the builds: the plan's meaning hash, kernel fingerprints,
models, providers, scenario hashes and input files. It renders the comparison as sentences
and as an HTML fragment for the report, and copies the kept audits into the site.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..analysis.provenance import AUDIT_FILE, HISTORY_DIR, kept_audits
from ..core.canonical import canonical_json, parse_number
from ..core.errors import DocumentError, InputError
from ..core.files import load_document, visible_control_characters, write_atomic

ALPHA = 0.05
"""A row is significant when its Holm-adjusted p is below this."""
HEADING = "Changes since the previous build"
SHORT_HASH = 12

SIGNIFICANT = "significant"
NOT_SIGNIFICANT = "not significant"
NOT_TESTED = "not tested"


# --------------------------------------------------------------------------- reading


def load_audit(path: str | Path) -> dict[str, Any]:
    """An audit read from an audit directory or from an audit.json (or a kept audit) file.

    Args:
        path: an audit directory, an audit.json, or an audit kept in `history/`.

    Returns:
        The audit document as read (not checked against its model: older audits compare too).

    Raises:
        DocumentError: the file is missing or cannot be parsed, naming it.
        InputError: the file is not an audit, naming it.
    """
    target = Path(path)
    if not target.exists():
        raise DocumentError(
            "no such file or directory", file=target, expected="an audit directory or an audit.json"
        )
    if target.is_dir():
        target = target / AUDIT_FILE
        if not target.is_file():
            raise DocumentError(
                "no audit.json here", file=target, expected="an audit directory built by analyse"
            )
    # Strings in audit.json may carry control characters: every one printed is made visible.
    audit = load_document(target, allow_control_characters=True).data
    if not isinstance(audit, dict) or "plan" not in audit or "schemaVersion" not in audit:
        raise InputError(
            "not an audit document", file=target, expected="audit.json written by analyse"
        )
    return audit


def previous(audit_dir: str | Path) -> dict[str, Any] | None:
    """The audit the latest build replaced (the newest kept in `history/`), or None."""
    kept = kept_audits(audit_dir)
    return load_audit(kept[-1]) if kept else None


def changes_since_previous(
    audit_dir: str | Path, audit: Mapping[str, Any]
) -> dict[str, Any] | None:
    """`diff_audits` of the latest kept audit against `audit` (the audit.json of `audit_dir`),
    with `previousFile` the kept file's path relative to the audit directory (pages link to it;
    the site keeps the same layout). None when no earlier build was kept."""
    kept = kept_audits(audit_dir)
    if not kept:
        return None
    diff = diff_audits(load_audit(kept[-1]), audit)
    diff["previousFile"] = f"{HISTORY_DIR}/{kept[-1].name}"
    return diff


def copy_history(audit_dir: str | Path, site_audit_dir: str | Path) -> list[Path]:
    """Copy the audits kept in `<audit dir>/history/` into `<site audit dir>/history/`, where
    they stay when the audit directory is cleaned: files the site has and the audit directory no
    longer has are left alone. Returns the files written (those new or changed)."""
    written = []
    for source in kept_audits(audit_dir):
        target = Path(site_audit_dir) / HISTORY_DIR / source.name
        data = source.read_bytes()
        if target.is_file() and target.read_bytes() == data:
            continue
        write_atomic(target, data)
        written.append(target)
    return written


# --------------------------------------------------------------------------- comparing


def diff_audits(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """What differs from one audit to another.

    Args:
        old: the earlier audit (`load_audit`).
        new: the later audit.

    Returns:
        Whether they are `identical`; the `grade` and its reasons; `conditions` and `metrics`
        added or removed; the rows (per metric, conditions in both) whose significance (Holm
        p < 0.05; rows not tested kept apart) or direction (sign of the difference) `moved`;
        and the `cause`.
    """
    old_ids = _condition_ids(old)
    new_ids = _condition_ids(new)
    old_metrics = _metrics(old)
    new_metrics = _metrics(new)
    return {
        "identical": canonical_json(old) == canonical_json(new),
        "grade": _grade_change(old, new),
        "conditions": {
            "added": [c for c in new_ids if c not in old_ids],
            "removed": [c for c in old_ids if c not in new_ids],
        },
        "metrics": {
            "added": [m for m in new_metrics if m not in old_metrics],
            "removed": [m for m in old_metrics if m not in new_metrics],
        },
        "moved": {
            metric: moved
            for metric in new_metrics
            if metric in old_metrics
            and (moved := _moved_rows(old, new, metric, [c for c in new_ids if c in old_ids]))
        },
        "cause": _cause(old, new),
    }


def _condition_ids(audit: Mapping[str, Any]) -> list[str]:
    return [str(c.get("id")) for c in audit.get("conditions") or [] if isinstance(c, Mapping)]


def _metrics(audit: Mapping[str, Any]) -> list[str]:
    listed = audit.get("metrics")
    if isinstance(listed, list):
        return [str(m) for m in listed]
    return [str(m) for m in (audit.get("tests") or {})]


def _grade_change(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    before = old.get("grade") or {}
    after = new.get("grade") or {}
    old_reasons = [str(r) for r in before.get("reasons") or []]
    new_reasons = [str(r) for r in after.get("reasons") or []]
    return {
        "old": before.get("grade"),
        "new": after.get("grade"),
        "changed": before.get("grade") != after.get("grade"),
        "reasonsAdded": [r for r in new_reasons if r not in old_reasons],
        "reasonsRemoved": [r for r in old_reasons if r not in new_reasons],
    }


def _finite(value: Any) -> float | None:
    number = parse_number(value)
    if isinstance(number, bool) or not isinstance(number, (int, float)):
        return None
    return float(number) if math.isfinite(number) else None


def row_state(row: Mapping[str, Any] | None) -> dict[str, Any]:
    """A test row's standing: `significant`, `not significant` or `not tested` (no row, a row
    with `tested: false`, or without a Holm p), its Holm p and difference, and the direction of
    the difference (`increase`, `decrease`, `none`, or None when it has none)."""
    holm = _finite(row.get("holmP")) if row else None
    diff = _finite(row.get("diff")) if row else None
    tested = row is not None and row.get("tested", True) is not False and holm is not None
    if not tested:
        state = NOT_TESTED
    else:
        state = SIGNIFICANT if holm is not None and holm < ALPHA else NOT_SIGNIFICANT
    direction = None
    if diff is not None:
        direction = "increase" if diff > 0 else "decrease" if diff < 0 else "none"
    return {"state": state, "holmP": holm, "diff": diff, "direction": direction}


def _rows(audit: Mapping[str, Any], metric: str) -> dict[str, Mapping[str, Any]]:
    rows = (audit.get("tests") or {}).get(metric) or []
    return {str(r.get("condition")): r for r in rows if isinstance(r, Mapping)}


def _labels(audit: Mapping[str, Any]) -> dict[str, str]:
    return {
        str(c.get("id")): str(c["label"])
        for c in audit.get("conditions") or []
        if isinstance(c, Mapping) and c.get("label")
    }


def _moved_rows(
    old: Mapping[str, Any], new: Mapping[str, Any], metric: str, shared: Sequence[str]
) -> list[dict[str, Any]]:
    before = _rows(old, metric)
    after = _rows(new, metric)
    labels = _labels(new)
    moved = []
    for condition in shared:
        if condition not in before and condition not in after:
            continue  # a base: never tested against itself
        was = row_state(before.get(condition))
        now = row_state(after.get(condition))
        changes = []
        if was["state"] != now["state"]:
            changes.append("significance")
        if (
            was["direction"] is not None
            and now["direction"] is not None
            and was["direction"] != now["direction"]
        ):
            changes.append("direction")
        if changes:
            moved.append(
                {
                    "condition": condition,
                    "label": labels.get(condition),
                    "changes": changes,
                    "old": was,
                    "new": now,
                }
            )
    return moved


def _cause(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """Which recorded facts of the two builds differ (None or an empty list: the same). `status`
    is `unknown` when either audit records no provenance (audits written before it existed);
    then `missing` says which, and only the software versions are compared."""
    before = old.get("provenance")
    after = new.get("provenance")
    missing = [
        which
        for which, record in (("previous", before), ("current", after))
        if not isinstance(record, Mapping)
    ]
    software = _changed(old.get("software"), new.get("software"))
    if missing or not isinstance(before, Mapping) or not isinstance(after, Mapping):
        return {
            "status": "unknown",
            "missing": missing,
            "planHash": None,
            "kernelFingerprints": None,
            "models": None,
            "providers": None,
            "scenarioHashes": [],
            "inputs": [],
            "software": software,
        }
    shared = [c for c in after.get("conditions") or {} if c in (before.get("conditions") or {})]
    scenarios = []
    inputs = []
    for condition in shared:
        was = before["conditions"][condition] or {}
        now = after["conditions"][condition] or {}
        if was.get("scenarioHash") != now.get("scenarioHash"):
            scenarios.append(
                {
                    "condition": condition,
                    "old": was.get("scenarioHash"),
                    "new": now.get("scenarioHash"),
                }
            )
        was_inputs = was.get("inputs") or {}
        now_inputs = now.get("inputs") or {}
        for name in sorted(set(was_inputs) | set(now_inputs)):
            if was_inputs.get(name) != now_inputs.get(name):
                inputs.append(
                    {
                        "condition": condition,
                        "input": name,
                        "old": was_inputs.get(name),
                        "new": now_inputs.get(name),
                    }
                )
    return {
        "status": "known",
        "missing": [],
        "planHash": _changed(before.get("planHash"), after.get("planHash")),
        "kernelFingerprints": _changed(
            before.get("kernelFingerprints"), after.get("kernelFingerprints")
        ),
        "models": _changed(before.get("models"), after.get("models")),
        "providers": _changed(before.get("providers"), after.get("providers")),
        "scenarioHashes": scenarios,
        "inputs": inputs,
        "software": software,
    }


def _changed(old: Any, new: Any) -> dict[str, Any] | None:
    return None if canonical_json(old) == canonical_json(new) else {"old": old, "new": new}


# --------------------------------------------------------------------------- rendering


def diff_lines(diff: Mapping[str, Any]) -> list[str]:
    """A difference of two audits as plain sentences.

    Args:
        diff: what `diff_audits` returned.

    Returns:
        One sentence per line, control characters made visible.
    """
    if diff.get("identical"):
        return ["No changes: the two audits are identical."]
    lines = _grade_lines(diff.get("grade") or {})
    conditions = diff.get("conditions") or {}
    if conditions.get("added"):
        lines.append(f"New conditions: {_join(conditions['added'])}.")
    if conditions.get("removed"):
        lines.append(f"Removed conditions: {_join(conditions['removed'])}.")
    metrics = diff.get("metrics") or {}
    if metrics.get("added"):
        lines.append(f"New metrics: {_join(metrics['added'])}.")
    if metrics.get("removed"):
        lines.append(f"Removed metrics: {_join(metrics['removed'])}.")
    moved = diff.get("moved") or {}
    for metric, rows in moved.items():
        for row in rows:
            lines.append(_moved_line(str(metric), row))
    if not moved:
        lines.append("No condition changed significance or direction.")
    lines.extend(_cause_lines(diff.get("cause") or {}))
    return [visible_control_characters(line) for line in lines]


def _join(items: Sequence[Any]) -> str:
    return ", ".join(str(i) for i in items)


def _grade_lines(grade: Mapping[str, Any]) -> list[str]:
    old = grade.get("old") or "unknown"
    new = grade.get("new") or "unknown"
    lines = [f"Grade: {old} → {new}." if grade.get("changed") else f"Grade unchanged: {new}."]
    lines.extend(f"New grade reason: {r}" for r in grade.get("reasonsAdded") or [])
    lines.extend(f"Grade reason no longer given: {r}" for r in grade.get("reasonsRemoved") or [])
    return lines


def _p(value: Any) -> str:
    return "—" if value is None else f"{value:.3g}"


def _signed(value: Any) -> str:
    return "—" if value is None else f"{value:+.3g}".replace("-", "−")


def _moved_line(metric: str, row: Mapping[str, Any]) -> str:
    label = row.get("label")
    name = str(row.get("condition"))
    if label and label != name:
        name += f" ({label})"
    was = row.get("old") or {}
    now = row.get("new") or {}
    parts = []
    if "significance" in (row.get("changes") or []):
        parts.append(
            f"{was.get('state')} → {now.get('state')} "
            f"(Holm p {_p(was.get('holmP'))} → {_p(now.get('holmP'))})"
        )
    if "direction" in (row.get("changes") or []):
        parts.append(
            f"direction {was.get('direction')} → {now.get('direction')} "
            f"(difference {_signed(was.get('diff'))} → {_signed(now.get('diff'))})"
        )
    return f"{metric}, {name}: {'; '.join(parts)}."


def _short(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_short(v) for v in value) + "]" if value else "none"
    if value is None:
        return "none"
    text = str(value)
    return (
        text[:SHORT_HASH]
        if len(text) == 64 and all(c in "0123456789abcdef" for c in text)
        else text
    )


def _cause_lines(cause: Mapping[str, Any]) -> list[str]:
    software = cause.get("software")
    lines = []
    if cause.get("status") != "known":
        missing = " and ".join(f"the {m} audit" for m in cause.get("missing") or []) or "one audit"
        lines.append(f"Cause: unknown ({missing} records no provenance).")
    else:
        plan = cause.get("planHash")
        if plan:
            lines.append(
                f"Cause: the plan's meaning changed (plan hash {_short(plan['old'])} → "
                f"{_short(plan['new'])})."
            )
        for key, what in (
            ("kernelFingerprints", "kernel fingerprint"),
            ("models", "models"),
            ("providers", "providers"),
        ):
            change = cause.get(key)
            if change:
                lines.append(
                    f"Cause: {what} changed ({_short(change['old'])} → {_short(change['new'])})."
                )
        scenarios = cause.get("scenarioHashes") or []
        if scenarios:
            lines.append(
                f"Cause: the scenario changed for {_count(len(scenarios), 'condition')}: "
                f"{_join([s['condition'] for s in scenarios])}."
            )
        for item in cause.get("inputs") or []:
            lines.append(
                f"Cause: input {item['input']} of {item['condition']} changed "
                f"({_short(item['old'])} → {_short(item['new'])})."
            )
        if not any(
            cause.get(k) for k in ("planHash", "kernelFingerprints", "models", "providers")
        ) and not (scenarios or cause.get("inputs")):
            lines.append(
                "Cause: none recorded: the plan, kernel, models, providers, scenarios and inputs "
                "are the same, so the runs themselves (rerun or edited) or the analysis differ."
            )
    if software:
        lines.append(
            f"The software that wrote the audit changed ({_short(_versions(software['old']))} → "
            f"{_short(_versions(software['new']))})."
        )
    return lines


def _versions(value: Any) -> str:
    if isinstance(value, Mapping):
        return ", ".join(f"{k} {v}" for k, v in sorted(value.items()))
    return "unknown" if value is None else str(value)


def _count(n: int, singular: str) -> str:
    return f"{n} {singular}" if n == 1 else f"{n} {singular}s"


def diff_html(diff: Mapping[str, Any], *, level: int = 2) -> str:
    """`diff` as an HTML fragment: a `<section>` headed "Changes since the previous build"
    (an `h<level>`) with one list item per sentence of `diff_lines`, and a relative link to the
    previous audit when `diff` names its file. Every text is escaped; no scripts, no styles."""
    heading = f"h{min(max(level, 1), 6)}"
    items = [f"<li>{html.escape(line)}</li>" for line in diff_lines(diff)]
    previous_file = diff.get("previousFile")
    if previous_file:
        href = html.escape(str(previous_file), quote=True)
        items.append(
            f'<li>Previous audit: <a href="{href}">{html.escape(str(previous_file))}</a></li>'
        )
    return "\n".join(
        [
            '<section id="changes" aria-labelledby="h-changes">',
            f'<{heading} id="h-changes">{HEADING}</{heading}>',
            "<ul>",
            *items,
            "</ul>",
            "</section>",
        ]
    )
