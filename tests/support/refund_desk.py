"""The refund desk example's assets, as tests read them: an asset file's content, the
environment data (its rules changed at will) and a tool contract's tools."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from simreport.kernel.testbed.assets import EnvironmentDataAsset, ToolContractAsset, ToolSpec

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "refund_desk"
ASSETS = EXAMPLE / "assets"


def asset_content(path: str) -> Any:
    """The `content` of the example's asset file at `path` (under assets/)."""
    return yaml.safe_load((ASSETS / path).read_text(encoding="utf-8"))["content"]


def env_data(**rules: Any) -> EnvironmentDataAsset:
    """The example's environment data, with `rules` (camelCase keys) over its own."""
    data = asset_content("env/ecom-seed/3.0.1.yaml")
    data["rules"] = {**data["rules"], **rules}
    return EnvironmentDataAsset.model_validate(data)


def contract_tools(version: str = "1.5.0") -> list[ToolSpec]:
    """The tools of the example's `refund-api` contract at `version`."""
    return ToolContractAsset.model_validate(asset_content(f"refund-api/{version}.yaml")).tools
