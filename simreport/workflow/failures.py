"""The end of a build (the Snakefile's onsuccess and onerror): every condition whose last job left
failed or missing runs, read from the state files, reported in one block on stderr; with
`failOnRunFailure` they fail the build."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .condition_jobs import read_state
from .targets import Workflow
from .terminal import say


@dataclass(frozen=True)
class PendingCondition:
    """A condition whose last job left failed or missing runs."""

    plan_id: str
    condition_id: str
    failures: list[str]
    log: str | None


def pending_conditions(workflow: Workflow) -> list[PendingCondition]:
    """Every condition of the workflow's plans with failed or missing runs, in plan order."""
    found = []
    for plan in workflow.plans:
        for target in plan.conditions:
            state = read_state(Path(target.state))
            if state.get("pending"):
                found.append(
                    PendingCondition(
                        plan.id,
                        target.condition.id,
                        [str(line) for line in state.get("failures") or []]
                        or [f"{len(state['pending'])} runs are pending"],
                        state.get("log"),
                    )
                )
    return found


def report_run_failures(
    workflow: Workflow,
    *,
    fail: bool,
    build_failed: bool = False,
    log: str | Sequence[str] | None = None,
) -> bool:
    """The end of a build (the Snakefile's onsuccess and onerror): a block on stderr naming each
    plan and condition with failed or missing runs, why, and the logs to read. Returns whether
    the build must fail because of them (`failOnRunFailure`)."""
    pending = pending_conditions(workflow)
    lines: list[str] = []
    if pending:
        runs = "error" if fail else "warning"
        lines.append(
            f"simreport {runs}: {len(pending)} condition(s) ended with failed or missing runs; "
            "the next build retries exactly those runs (the others are reused):"
        )
        for item in pending:
            lines.append(f"  {item.plan_id} · {item.condition_id}")
            lines.extend(f"    {line}" for line in item.failures)
            if item.log:
                lines.append(f"    log: {item.log}")
        if not fail:
            lines.append(
                "  Failed runs are data in audit.json (left out of the statistics unless "
                "includeIncomplete); set failOnRunFailure: true to make such a build fail."
            )
    logs = [log] if isinstance(log, str) else list(log or [])
    if (pending or build_failed) and logs:
        lines.append(f"simreport: Snakemake's log of this build: {', '.join(map(str, logs))}")
    if lines:
        say("\n".join(lines))
    return fail and bool(pending)
