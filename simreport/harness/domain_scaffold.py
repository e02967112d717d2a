"""A folder for testing your own agent in your own domain: a domain asset, a user flow with its
wording, agent assets (an example Python agent, and the same reached over HTTP), prompts,
assertions, a commented `scenario.yaml` and `audit.yaml` — all of which validate and run offline
as written. The files come from `scaffolds/domain/`, the domain's name put in (`{{name}}`,
`{{module}}`, the folder names `NAME`, `MODULE`; `.template` dropped); nothing is written when
a file would be replaced, unless `force` is given. The tutorial: docs/howto/new-domain.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from ..core.errors import InputError
from ..core.files import check_output_dir
from .new_plan import (
    PLAN_FILE,
    SCENARIO_FILE,
    AxisLevels,
    WorldPlan,
    folder_files,
    plan_text,
    write_new_files,
)

SCAFFOLD = Path(__file__).resolve().parent / "scaffolds" / "domain"
"""The files of a new domain's folder, with the domain's name left as placeholders."""

DOMAIN_NAME = re.compile(r"^[a-z][a-z0-9]*(?:[_-][a-z0-9]+)*$")
MAX_NAME_LENGTH = 40
NAME_EXPECTED = (
    "a name in lower case: letters and digits, words joined by - or _, starting with a letter, "
    f"at most {MAX_NAME_LENGTH} characters (e.g. parcel-desk)"
)
DEFAULT_REPLICATIONS = 5


@dataclass(frozen=True)
class NewDomain:
    """What `new_domain` wrote: the folder, its scenario, plan and example agent, every file."""

    folder: Path
    scenario_file: Path
    plan_file: Path
    agent_file: Path
    files: tuple[Path, ...]


def new_domain(name: str, *, out: str | Path | None = None, force: bool = False) -> NewDomain:
    """Write a folder that tests an example agent in a new domain named `name`, ready to run.

    Args:
        name: the domain's name (its asset is `<name>@1.0.0`, the other assets `<name>-…`).
        out: the folder to write into (default: a folder named `name`).
        force: replace files that already exist instead of refusing.

    Returns:
        The folder, its scenario, plan and agent module, and every file written.

    Raises:
        InputError: a name that cannot be a domain's, or a folder that cannot be one.
        WouldOverwrite: a file exists and `force` was not given (`existing` lists them);
            nothing was written.
    """
    if len(name) > MAX_NAME_LENGTH or not DOMAIN_NAME.match(name):
        raise InputError(f"{name!r} cannot name a domain", path="NAME", expected=NAME_EXPECTED)
    folder = Path(out) if out is not None else Path(name)
    check_output_dir(folder, name="--out")
    module = name.replace("-", "_")
    scenario_file = folder / SCENARIO_FILE
    # The scenario and the plan first: a refusal to overwrite names the first file it would.
    contents: dict[Path, str | bytes] = {scenario_file: "", folder / PLAN_FILE: ""}
    for source in folder_files(SCAFFOLD):
        relative = source.relative_to(SCAFFOLD).as_posix()
        # A template of Python code is no module of this package: it is stored as .template.
        target = relative.replace("NAME", name).replace("MODULE", module).removesuffix(".template")
        text = source.read_text(encoding="utf-8")
        contents[folder / target] = text.replace("{{name}}", name).replace("{{module}}", module)
    domain_file = folder / "assets" / name / "1.0.0.yaml"
    contents[folder / PLAN_FILE] = _plan(
        name,
        yaml.safe_load(str(contents[scenario_file])),
        yaml.safe_load(str(contents[domain_file])),
    )
    written = write_new_files(contents, force=force)
    return NewDomain(
        folder, scenario_file, folder / PLAN_FILE, folder / f"{module}_agent.py", written
    )


def _plan(name: str, scenario: dict[str, object], domain: dict[str, object]) -> str:
    """The commented audit plan: the fault's position and the prompt's version varied, the
    metrics those the domain declares."""
    from ..kernel.testbed.domain.model import DomainAsset

    declared = DomainAsset.model_validate(domain["content"]).metrics
    spec = WorldPlan(
        title=f"{name}: does the agent send one replacement wherever the fault strikes and "
        "however it is instructed?",
        axes={
            "environment_structure": AxisLevels(
                ("not_sent", "sent_not_committed"),
                target="events.triggers.0.position",
                note="where in the replacement's life the timeout strikes.",
            ),
            "linguistic_framing": AxisLevels(
                (f"{name}-prompt@2.0.0",),
                target="sut.prompt",
                note="the agent's instructions; 2.0.0 drops the advice to verify after a timeout.",
            ),
        },
        default_axes=("environment_structure", "linguistic_framing"),
        primary_metric="duplicateShipments",
        margin=0.25,
    )
    return plan_text(
        "testbed",
        spec.default_axes,
        scenario,
        replications=DEFAULT_REPLICATIONS,
        metrics={key: metric.description for key, metric in declared.items()},
        spec=spec,
    )
