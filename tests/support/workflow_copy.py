"""A copy of the workflow for end-to-end tests, so a test can edit code, plans and config freely
and never reads the user's own `config/config.yaml` plans.

Test modules import this as `from tests.support.workflow_copy import ...`."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW_FILES = ("Snakefile", "rules", "config", "profiles", "envs", "report", "simreport")


def copy_workflow(dest: Path, config: dict[str, Any], *, examples: bool = False) -> Path:
    """The workflow's files (and the examples, when asked) under `dest`, with `config` as its
    config/config.yaml. The copy's package is the one imported when PYTHONPATH points at it."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in (*WORKFLOW_FILES, *(("examples",) if examples else ())):
        source = ROOT / name
        if source.is_symlink():
            os.symlink(os.readlink(source), dest / name)
        elif source.is_dir():
            # Bytecode too: it stays valid in the copy (same sizes and times), and every
            # process of a build compiling the package afresh cost a first build seconds.
            shutil.copytree(source, dest / name, symlinks=True)
        else:
            shutil.copy2(source, dest / name)
    write_config(dest, config)
    return dest


def write_config(dest: Path, config: dict[str, Any]) -> None:
    (dest / "config" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
