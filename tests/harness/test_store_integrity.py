"""The run store cannot be poisoned: an edited result never reaches it, and a damaged entry is
discarded, recomputed and replaced (SPEC §12)."""

from __future__ import annotations

import io
import json
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

import simreport
from simreport.core.schema import RunResult
from simreport.harness import RunStore, load_plan, run_audit
from simreport.kernel import run_scenario, validate_scenario

EXAMPLE_PLAN = Path(__file__).resolve().parents[2] / "examples" / "prisoners_dilemma" / "audit.yaml"
KEY = "ab" + "0" * 62


def _run(out: Path) -> RunResult:
    scenario = validate_scenario({"world": "prisoners_dilemma", "steps": 2, "population": {"n": 2}})
    result = run_scenario(scenario, out, condition="base", replication=0, asset_root=out.parent)
    assert result.succeeded
    return result


def _contents(run: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(run.iterdir()) if not p.name.startswith(".")}


def _edit_in_place(path: Path, edit: Callable[[bytes], bytes]) -> None:
    """Rewrite a file through its own inode, as an editor or `>>` would."""
    os.chmod(path, 0o644)  # a stored file is read-only; its owner (or root) can still do this
    inode = path.stat().st_ino
    new = edit(path.read_bytes())
    with open(path, "r+b") as handle:
        handle.write(new)
        handle.truncate()
    assert path.stat().st_ino == inode


def _double_metrics(data: bytes) -> bytes:
    doc = json.loads(data)
    doc["metrics"] = {name: value * 2 + 1 for name, value in doc["metrics"].items()}
    return json.dumps(doc).encode()


@pytest.fixture
def stored(tmp_path: Path) -> tuple[RunStore, Path, dict[str, bytes]]:
    """A store holding one finished run, the run's directory and its files' original bytes."""
    store = RunStore(tmp_path / "store")
    run = tmp_path / "run"
    store.keep(KEY, run, _run(run))
    return store, run, _contents(run)


def _entry(store: RunStore) -> Path:
    (entry,) = [p for p in store.root.glob("*/*") if not p.name.startswith(".")]
    return entry


def test_editing_a_result_in_place_does_not_reach_the_store(
    stored: tuple[RunStore, Path, dict[str, bytes]], tmp_path: Path
) -> None:
    store, run, original = stored
    fetched = tmp_path / "fetched"
    assert store.fetch(KEY, fetched) is not None
    entry = _entry(store)
    for name in original:
        stored_file = (entry / name).stat()
        assert stored_file.st_ino not in {
            (run / name).stat().st_ino,
            (fetched / name).stat().st_ino,
        }
        assert not stored_file.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)
    _edit_in_place(run / "result.json", _double_metrics)
    with open(fetched / "result.json", "ab") as handle:
        handle.write(b"\n{}")
    again = tmp_path / "again"
    result = store.fetch(KEY, again)
    assert result is not None
    assert _contents(again) == original


DAMAGE: dict[str, Callable[[Path], None]] = {
    "metric edited": lambda e: _edit_in_place(e / "result.json", _double_metrics),
    "events truncated": lambda e: _edit_in_place(e / "events.jsonl", lambda b: b[: len(b) // 2]),
    "scenario appended to": lambda e: _edit_in_place(e / "scenario.json", lambda b: b + b" "),
    "manifest deleted": lambda e: (e / "manifest.json").unlink(),
    "result deleted": lambda e: (e / "result.json").unlink(),
    "digest deleted": lambda e: (e / "digest.json").unlink(),
    "digest garbled": lambda e: _edit_in_place(e / "digest.json", lambda b: b[:10]),
    "file added": lambda e: (e / "evidence.json").write_text("{}"),
}


@pytest.mark.parametrize("damage", DAMAGE.values(), ids=DAMAGE.keys())
def test_a_damaged_entry_is_discarded_then_stored_again(
    stored: tuple[RunStore, Path, dict[str, bytes]],
    tmp_path: Path,
    damage: Callable[[Path], None],
) -> None:
    store, run, original = stored
    entry = _entry(store)
    damage(entry)
    target = tmp_path / "target"
    assert store.fetch(KEY, target) is None
    assert not entry.exists()
    assert not [p for p in store.root.rglob("*") if p.is_file()]  # nothing set aside remains
    assert not (target / "result.json").exists()
    store.keep(KEY, run, RunResult.model_validate_json((run / "result.json").read_bytes()))
    assert store.fetch(KEY, target) is not None
    assert _contents(target) == original


@pytest.mark.parametrize("damage", DAMAGE.values(), ids=DAMAGE.keys())
def test_keep_replaces_a_damaged_entry(
    stored: tuple[RunStore, Path, dict[str, bytes]],
    tmp_path: Path,
    damage: Callable[[Path], None],
) -> None:
    store, run, original = stored
    damage(_entry(store))
    store.keep(KEY, run, RunResult.model_validate_json((run / "result.json").read_bytes()))
    target = tmp_path / "target"
    assert store.fetch(KEY, target) is not None
    assert _contents(target) == original


def test_an_entry_under_another_key_is_not_served(
    stored: tuple[RunStore, Path, dict[str, bytes]], tmp_path: Path
) -> None:
    store, _, _ = stored
    other = "cd" + "0" * 62
    (store.root / other[:2]).mkdir()
    _entry(store).rename(store.root / other[:2] / other)
    assert store.fetch(other, tmp_path / "target") is None


def test_reflinked_copies_are_checked_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the filesystem clones files, the clone is what gets hashed."""
    from simreport.harness import store as store_module

    def clone(source: io.BufferedIOBase, target: io.BufferedIOBase) -> bool:
        shutil.copyfileobj(source, target)
        return True

    monkeypatch.setattr(store_module, "_reflink", clone)
    store = RunStore(tmp_path / "store")
    run = tmp_path / "run"
    store.keep(KEY, run, _run(run))
    assert store.fetch(KEY, tmp_path / "fetched") is not None
    assert _contents(tmp_path / "fetched") == _contents(run)
    _edit_in_place(_entry(store) / "events.jsonl", lambda b: b[:-2])
    assert store.fetch(KEY, tmp_path / "damaged") is None


def _temporaries(directory: Path) -> list[Path]:
    return [p for p in directory.rglob("*") if p.name.startswith(".") or p.suffix == ".tmp"]


def test_fetch_leaves_no_temporary_files(
    stored: tuple[RunStore, Path, dict[str, bytes]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store, run, _ = stored
    result = RunResult.model_validate_json((run / "result.json").read_bytes())
    # placed
    target = tmp_path / "target"
    assert store.fetch(KEY, target) is not None
    assert not _temporaries(target)
    # refused after every other file was copied: result.json is checked last
    _edit_in_place(_entry(store) / "result.json", _double_metrics)
    assert store.fetch(KEY, tmp_path / "damaged") is None
    assert not _temporaries(tmp_path / "damaged")
    # copied and verified, but the target refuses the rename
    store.keep(KEY, run, result)

    def refuse(*_: object) -> None:
        raise OSError("disk full")

    with monkeypatch.context() as patch:
        patch.setattr(os, "replace", refuse)
        assert store.fetch(KEY, tmp_path / "refused") is None
    assert not _temporaries(tmp_path / "refused")
    assert store.fetch(KEY, tmp_path / "after") is not None  # a target's failure keeps the entry

    # interrupted after every file was copied
    def interrupt(*_: object) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(RunResult, "model_validate_json", interrupt)
        with pytest.raises(KeyboardInterrupt):
            store.fetch(KEY, tmp_path / "interrupted")
    assert not _temporaries(tmp_path / "interrupted")


def _poison_in_place(audit_dir: Path) -> int:
    poisoned = 0
    for result in sorted((audit_dir / "runs").rglob("result.json")):
        _edit_in_place(result, _double_metrics)
        poisoned += 1
    return poisoned


def _build(out: Path, store: RunStore | None) -> bytes:
    loaded = load_plan(EXAMPLE_PLAN, replications=2, concurrency=1)
    run_audit(loaded, out, store=store, concurrency=1)
    simreport.analyse(out)
    return (out / "audit.json").read_bytes()


def test_a_rebuild_from_a_poisoned_store_equals_a_clean_build(tmp_path: Path) -> None:
    clean = _build(tmp_path / "clean", None)
    store = RunStore(tmp_path / "results" / ".store")
    assert _build(tmp_path / "results" / "first", store) == clean
    # results edited in place after they were stored
    assert _poison_in_place(tmp_path / "results" / "first") > 0
    assert _build(tmp_path / "results" / "second", store) == clean
    # the store's own entries edited, truncated and deleted in place
    entries = sorted(p for p in store.root.glob("*/*") if not p.name.startswith("."))
    _edit_in_place(entries[0] / "result.json", _double_metrics)
    _edit_in_place(entries[1] / "events.jsonl", lambda b: b[:100])
    (entries[2] / "digest.json").unlink()
    assert _build(tmp_path / "results" / "third", store) == clean
    assert all(RunStore(store.root).fetch(e.name, tmp_path / "check") for e in entries[:3])
