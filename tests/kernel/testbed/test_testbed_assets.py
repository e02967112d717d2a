"""The asset library: labels resolve to exact versions with their sha256, anything inexact is an
error, replays pin versions, and the manifest facts never carry a label."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from simreport.kernel.testbed.assets import (
    AgentAsset,
    AssetError,
    AssetLibrary,
    manifest_facts,
)

EXAMPLE_ASSETS = Path(__file__).resolve().parents[3] / "examples" / "refund_desk" / "assets"


def write(root: Path, name: str, file_version: str, content: Any, **header: Any) -> Path:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    doc = {"kind": "agent", "name": name, "version": file_version, "content": content, **header}
    path = folder / f"{file_version}.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def test_a_label_resolves_to_the_exact_version_and_digest() -> None:
    library = AssetLibrary(EXAMPLE_ASSETS)
    asset = library.resolve("refund-agent@stable", "agent", "sut.agent")
    assert (asset.name, asset.version) == ("refund-agent", "2.4.1")
    assert asset.sha256 == hashlib.sha256(asset.path.read_bytes()).hexdigest()
    assert isinstance(asset.content, AgentAsset) and asset.content.adapter == "reference"
    nested = library.resolve("env/ecom-seed@3.0.1", "env_data", "environment.data")
    assert nested.record(EXAMPLE_ASSETS)["file"] == "env/ecom-seed/3.0.1.yaml"


@pytest.mark.parametrize(
    ("ref", "kind", "message"),
    [
        ("refund-agent@9.9.9", "agent", "does not exist"),
        ("refund-agent@canary", "agent", "not defined"),
        ("nobody@1.0.0", "agent", "no asset named"),
        ("refund-agent@2.4.1", "prompt", "is a agent asset"),
        ("refund-agent", "agent", "not an asset reference"),
    ],
)
def test_unresolvable_references(ref: str, kind: Any, message: str) -> None:
    with pytest.raises(AssetError) as info:
        AssetLibrary(EXAMPLE_ASSETS).resolve(ref, kind, "slot")
    assert message in str(info.value)


def test_asset_files_are_checked(tmp_path: Path) -> None:
    write(tmp_path, "a", "1.0.0", {"adapter": "reference"}, version="1.0.1")
    write(tmp_path, "b", "1.0.0", {"adapter": "telepathy"})
    write(tmp_path, "c", "1.0.0", {"adapter": "reference"}, status="offline")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "labels.yaml").write_text("stable: latest\n")
    library = AssetLibrary(tmp_path)
    for ref, message in (
        ("a@1.0.0", "declares a@1.0.1"),
        ("b@1.0.0", "not a valid asset at adapter"),
        ("c@1.0.0", "offline"),
        ("d@stable", "not a version"),
    ):
        with pytest.raises(AssetError) as info:
            library.resolve(ref, "agent", "slot")
        assert message in str(info.value)


def test_pins_replace_label_resolution(tmp_path: Path) -> None:
    write(tmp_path, "a", "1.0.0", {"adapter": "reference"})
    write(tmp_path, "a", "2.0.0", {"adapter": "http", "entry": "http://127.0.0.1:1"})
    (tmp_path / "a" / "labels.yaml").write_text("stable: 2.0.0\n")
    assert AssetLibrary(tmp_path).resolve("a@stable", "agent", "s").version == "2.0.0"
    assert (
        AssetLibrary(tmp_path, pins={"a": "1.0.0"}).resolve("a@stable", "agent", "s").version
        == "1.0.0"
    )


def test_manifest_facts_lock_versions_not_labels() -> None:
    library = AssetLibrary(EXAMPLE_ASSETS)
    resolved = {
        "sut.agent": library.resolve("refund-agent@stable", "agent", "sut.agent"),
        "sut.prompt": library.resolve("refund-prompt@stable", "prompt", "sut.prompt"),
    }
    doc = {"seed": 1, "seedPath": [0], "sut": {"agent": "refund-agent@stable"}}
    facts = manifest_facts(doc, resolved, EXAMPLE_ASSETS, identity={"id": "s", "version": "1.0.0"})
    assert set(facts["assets"]) == {"refund-agent@2.4.1", "refund-prompt@1.0.0"}
    assert "stable" not in json.dumps(facts)
    again = manifest_facts(doc, resolved, EXAMPLE_ASSETS, identity={"id": "s", "version": "1.0.0"})
    assert again["manifestSha256"] == facts["manifestSha256"]
    other = manifest_facts({**doc, "seedPath": [1]}, resolved, EXAMPLE_ASSETS, identity=None)
    assert other["manifestSha256"] != facts["manifestSha256"]
