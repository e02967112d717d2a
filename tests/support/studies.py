"""The smallest study the tests build: a four-agent prisoner's dilemma of three steps and a plan of
two framings against the base, two replications each (3 conditions, 6 runs). `scenario_text` and
`plan_text` write it with the parameters a test varies, `write_study` puts both files in a folder,
and the `tiny_study` fixture (tests/conftest.py) writes the default one into a test's tmp_path."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def scenario_text(
    *, steps: int = 3, n: int = 4, seed: int = 5, llm: Mapping[str, Any] | None = None
) -> str:
    """The study's scenario; `llm` adds an `llm:` block with these keys, in this order."""
    llm_block = "".join(f"  {key}: {json.dumps(value)}\n" for key, value in (llm or {}).items())
    return (
        "world: prisoners_dilemma\n"
        f"steps: {steps}\n"
        f"seed: {seed}\n"
        "population:\n"
        f"  n: {n}\n"
        "  fields:\n"
        "    disposition: [cooperative, competitive]\n"
        + (f"llm:\n{llm_block}" if llm else "")
        + "params:\n"
        "  framing: neutral\n"
        "  memoryWindow: 2\n"
    )


def plan_text(
    *,
    replications: int = 2,
    levels: Sequence[str] = ("moralised", "risk"),
    metrics: Sequence[str] = ("cooperationRate",),
    concurrency: int | None = None,
    scenario: str = "scenario.yaml",
) -> str:
    """The study's plan: the framing levels against the base scenario in the file `scenario`."""
    return (
        f"baseScenario: {scenario}\n"
        f"replications: {replications}\n"
        + (f"concurrency: {concurrency}\n" if concurrency is not None else "")
        + f"metrics: [{', '.join(metrics)}]\n"
        "axes:\n"
        "  - template: linguistic_framing\n"
        f"    levels: [{', '.join(levels)}]\n"
    )


SCENARIO = scenario_text()
PLAN = plan_text()


@dataclass(frozen=True)
class Study:
    """Where a study was written: its folder, its scenario.yaml and its plan."""

    folder: Path
    scenario: Path
    plan: Path


def write_study(
    folder: Path, scenario: str = SCENARIO, plan: str = PLAN, *, plan_name: str = "audit.yaml"
) -> Study:
    """Write scenario.yaml and the plan (`plan_name`) into `folder`, made if missing."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "scenario.yaml").write_text(scenario)
    (folder / plan_name).write_text(plan)
    return Study(folder, folder / "scenario.yaml", folder / plan_name)
