"""Linking a recorded run to its evaluation: the run table's `quality_ref`, set from the
evaluation.json its folder holds once that is checked (its qualityRef matches its content, and it
was made from the folder's result.json). Judging a run again replaces the link; the run itself
never changes. The design: docs/ledger.md.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ..core.canonical import sha256_bytes
from ..core.errors import DocumentError, InputError
from ..core.files import read_json
from ..core.quality_ref import EVALUATION_FILE, QUALITY_REF_KEY, quality_ref_problem
from . import tables as t
from .errors import NotRecorded
from .migrate import prepare_once
from .rundir import RESULT_FILE, run_identity


def evaluation_quality_ref(run_dir: str | Path) -> str | None:
    """The quality_ref a run folder's evaluation.json links it to, checked; None when the folder
    has no evaluation.json. An evaluation changed after it was written, or made from another
    result.json than the folder's, raises InputError naming the file. (Ingest may call this to
    set quality_ref when it records a run folder that was evaluated already.)"""
    path = Path(run_dir) / EVALUATION_FILE
    if not path.is_file():
        return None
    try:
        evaluation = read_json(path)
    except (OSError, ValueError) as exc:
        raise DocumentError(f"cannot read: {exc}", file=path) from None
    problem = quality_ref_problem(evaluation)
    if problem is not None:
        raise InputError(problem, file=path, path=QUALITY_REF_KEY)
    inputs = (evaluation.get("run") or {}).get("inputs") or {}
    result = Path(run_dir) / RESULT_FILE
    found = sha256_bytes(result.read_bytes()) if result.is_file() else None
    if inputs.get(RESULT_FILE) != found:
        raise InputError(
            "the evaluation was made from another result.json than the run folder holds",
            file=path,
            path="run.inputs.result.json",
            expected=f"sha256 {found} (evaluate the run again)",
        )
    return str(evaluation[QUALITY_REF_KEY])


def record_evaluation(engine: Engine, run_dir: str | Path) -> str:
    """Set the recorded run's `quality_ref` from its folder's evaluation.json; returns it.
    Refused: a folder without an evaluation (InputError), a run the ledger does not hold
    (NotRecorded). A link to an earlier evaluation of the run is replaced."""
    folder = Path(run_dir)
    ref = evaluation_quality_ref(folder)
    if ref is None:
        raise InputError(
            "the run has no evaluation to record",
            file=folder / EVALUATION_FILE,
            expected="run `simreport evaluate` first",
        )
    run_id = run_identity(folder).run_id
    prepare_once(engine)
    with engine.begin() as conn:
        _link(conn, folder, run_id, ref)
    return ref


def record_evaluations(
    engine: Engine, run_dirs: Iterable[str | Path]
) -> list[tuple[Path, str | Exception]]:
    """`record_evaluation` for many run folders in one transaction, each link in a savepoint
    of its own (a refused one is left out alone); folders without an evaluation are skipped.
    Returns each folder with its quality_ref, or the error that refused it."""
    found: list[tuple[Path, str, str] | tuple[Path, InputError]] = []
    for run_dir in run_dirs:
        folder = Path(run_dir)
        try:
            ref = evaluation_quality_ref(folder)
            if ref is not None:
                found.append((folder, run_identity(folder).run_id, ref))
        except InputError as exc:
            found.append((folder, exc))
    if not found:
        return []
    prepare_once(engine)
    done: list[tuple[Path, str | Exception]] = []
    with engine.begin() as conn:
        for item in found:
            if isinstance(item[1], InputError):
                done.append((item[0], item[1]))
                continue
            folder, run_id, ref = item
            savepoint = conn.begin_nested()
            try:
                _link(conn, folder, run_id, ref)
            except InputError as exc:
                savepoint.rollback()
                done.append((folder, exc))
                continue
            savepoint.commit()
            done.append((folder, ref))
    return done


def _link(conn: Connection, folder: Path, run_id: str, ref: str) -> None:
    current = conn.execute(sa.select(t.run.c.quality_ref).where(t.run.c.run_id == run_id)).first()
    if current is None:
        raise NotRecorded(
            f"run {run_id} is not in the ledger, so its evaluation cannot be linked",
            file=folder,
            expected="the run recorded first (`simreport ledger ingest`)",
        )
    if current.quality_ref != ref:
        conn.execute(sa.update(t.run).where(t.run.c.run_id == run_id).values(quality_ref=ref))
