"""The files the documented examples write (the run service's tokens.yaml, version.json and
paced.yaml, Snakemake's report.zip) are never committed: in scratch/, where the examples put
them, nor in the repository's root; the same names elsewhere (an example's own file) are."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_OUTPUTS = ("tokens.yaml", "paced.yaml", "version.json", "report.zip")

pytestmark = pytest.mark.skipif(
    shutil.which("git") is None or not (ROOT / ".git").exists(),
    reason="needs git and the repository's checkout",
)


def _ignored(*paths: str) -> set[str]:
    proc = subprocess.run(
        ["git", "check-ignore", "--no-index", *paths],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode in (0, 1), proc.stderr  # 1: none of them is ignored
    return set(proc.stdout.split())


def test_example_outputs_in_scratch_and_in_the_root_are_ignored() -> None:
    assert _ignored(*EXAMPLE_OUTPUTS) == set(EXAMPLE_OUTPUTS)
    in_scratch = [f"scratch/{name}" for name in EXAMPLE_OUTPUTS]
    assert _ignored(*in_scratch) == set(in_scratch)


def test_the_same_names_elsewhere_are_not() -> None:
    elsewhere = [f"examples/refund_desk/{name}" for name in EXAMPLE_OUTPUTS]
    assert _ignored(*elsewhere) == set()
