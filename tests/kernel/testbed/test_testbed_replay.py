"""`simreport replay`: a run re-run from its recorded responses and faults matches record by record;
an edited record, a changed asset or a changed decision is reported."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pytest

from simreport.cli.replay import register_cli
from simreport.kernel import load_scenario, run_scenario, validate_scenario
from simreport.kernel.replay_runner import replay_run
from simreport.kernel.testbed.records import read_records, record_digest
from simreport.kernel.testbed.replay_records import ReplaySource, compare_records

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "refund_desk"


def make_run(tmp_path: Path, root: Path = EXAMPLE) -> Path:
    loaded = load_scenario(root / "scenario.yaml")
    out = tmp_path / "run"
    run_scenario(loaded.scenario, out, asset_root=loaded.asset_root)
    return out


def write_records(path: Path, records: list[dict[str, object]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def test_replay_matches_the_recorded_run(tmp_path: Path) -> None:
    out = make_run(tmp_path)
    report = replay_run(out, tmp_path / "replayed")
    assert report.ok, report.summary()
    assert report.matched == report.original == len(read_records(out / "records.jsonl"))
    assert "records match" in report.summary()
    replayed = json.loads((tmp_path / "replayed" / "manifest.json").read_text())
    assert replayed["faultBackend"] == "recorded"
    assert (
        replayed["manifestSha256"]
        == json.loads((out / "manifest.json").read_text())["manifestSha256"]
    )


def test_replay_detects_a_tampered_record(tmp_path: Path) -> None:
    out = make_run(tmp_path)
    records = read_records(out / "records.jsonl")
    target = next(r for r in records if r["type"] == "tool.response")
    target["payload"]["outcome"] = "ok"  # the lost answer rewritten as a success
    write_records(out / "records.jsonl", records)
    report = replay_run(out)
    assert not report.ok
    assert target["recordId"] in report.tampered
    assert report.first_difference is not None
    assert report.first_difference["seq"] == target["seq"]
    assert target["recordId"] in report.summary()


def test_replay_follows_an_edited_decision_and_reports_where_paths_part(tmp_path: Path) -> None:
    out = make_run(tmp_path)
    records = read_records(out / "records.jsonl")
    decision = next(
        r
        for r in records
        if r["type"] == "agent.decision" and r["payload"]["chosen"] != r["payload"]["options"][-1]
    )
    decision["payload"]["chosen"] = decision["payload"]["options"][-1]
    decision["sha256"] = record_digest(decision)  # even with a recomputed digest
    write_records(out / "records.jsonl", records)
    report = replay_run(out)
    assert not report.ok
    assert report.tampered == []
    assert report.first_difference is not None and report.first_difference["seq"] > decision["seq"]


def test_replay_pins_asset_versions_and_detects_changed_content(tmp_path: Path) -> None:
    root = tmp_path / "refund_desk"
    shutil.copytree(EXAMPLE, root)
    out = make_run(tmp_path, root)
    # Moving the label does not change what a replay uses ...
    (root / "assets" / "refund-prompt" / "labels.yaml").write_text("stable: 2.0.0\n")
    assert replay_run(out).ok
    # ... but editing the recorded version's content does.
    prompt = root / "assets" / "refund-prompt" / "1.0.0.yaml"
    prompt.write_text(prompt.read_text().replace("careful and precise", "careless"))
    report = replay_run(out)
    assert not report.ok
    # The replay runs under the digests its manifest recorded: it fails while loading, naming
    # the asset, before comparing a single record.
    assert report.error is not None and "asset_version_changed" in report.error
    assert "refund-prompt@1.0.0" in report.error


def test_compare_records_reports_length_differences() -> None:
    a = [{"seq": 1, "recordId": "r1", "type": "x", "payload": {}}]
    for r in a:
        r["sha256"] = record_digest(r)
    report = compare_records([*a, dict(a[0], seq=2)], a)
    assert not report.ok
    assert report.first_difference is not None
    # The record only the recorded run has: the one at seq 2, and no replayed side.
    assert report.first_difference["seq"] == 2
    assert "recorded" in report.first_difference and "replayed" not in report.first_difference


def test_replay_source_answers_recorded_choices_only_when_offered() -> None:
    from simreport.kernel.world import DecisionRequest

    source = ReplaySource(
        decisions={
            "agent": [
                {"chosen": "b"},
                {"chosen": "z"},
                {"chosen": None, "failure": "llm"},
                {"chosen": None, "failure": "parse", "raw": "nonsense"},
            ]
        }
    )
    request = DecisionRequest("s", "i", ("a", "b"))
    assert source.decide("agent", request).option == "b"
    assert source.decide("agent", request).failure == "replay_mismatch"
    # A recorded lost decision is replayed as lost, with its recorded failure kind.
    lost = source.decide("agent", request)
    assert (lost.option, lost.failure) == (None, "llm")
    parse = source.decide("agent", request)
    assert (parse.option, parse.failure, parse.raw) == (None, "parse", "nonsense")
    assert source.decide("agent", request).failure == "replay_exhausted"


def test_replay_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="simreport")
    register_cli(parser.add_subparsers(dest="command"))
    out = make_run(tmp_path)
    args = parser.parse_args(["replay", str(out)])
    assert args.func(args) == 0
    assert "records match" in capsys.readouterr().out
    records = read_records(out / "records.jsonl")
    records[-1]["payload"]["to"] = "FAILED"
    write_records(out / "records.jsonl", records)
    assert args.func(args) == 1
    assert "records differ" in capsys.readouterr().out


def test_replay_refuses_a_directory_without_records(tmp_path: Path) -> None:
    from simreport.core.errors import InputError

    with pytest.raises(InputError):
        replay_run(tmp_path)


def _llm_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, lose_first: bool, key: bool
) -> Path:
    from tests.support.llm_server import FakeLLM

    monkeypatch.setenv("SIMREPORT_CACHE_MODE", "live")
    lost = {"n": 0}

    def answer(body: dict[str, object], options: list[str]) -> str:
        if lose_first and "ask for the order number" in options and not lost["n"]:
            lost["n"] += 1
            return "no such option at all"
        return options[0] if options else "ok"

    loaded = load_scenario(EXAMPLE / "scenario.yaml")
    llm: dict[str, object] = {"provider": "openai", "model": "test", "temperature": 0}
    if key:
        monkeypatch.setenv("SIMREPORT_TEST_REPLAY_KEY", "sk-replay-secret")
        llm["apiKeyEnv"] = "SIMREPORT_TEST_REPLAY_KEY"
    out = tmp_path / "run"
    with FakeLLM(answer=answer) as server:
        llm["baseUrl"] = server.url
        doc = {**loaded.scenario.to_doc(), "llm": llm}
        result = run_scenario(validate_scenario(doc), out, asset_root=loaded.asset_root)
    assert result.failure is None, result.failure
    return out


def test_replay_aligns_a_run_with_a_lost_decision(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = _llm_run(tmp_path, monkeypatch, lose_first=True, key=False)
    records = read_records(out / "records.jsonl")
    assert any(r["type"] == "agent.decision" and r["payload"]["chosen"] is None for r in records)
    # The server is gone: the replay answers from the records alone.
    report = replay_run(out, tmp_path / "replayed")
    assert report.ok, report.summary()
    replayed = json.loads((tmp_path / "replayed" / "result.json").read_text())
    original = json.loads((out / "result.json").read_text())
    assert replayed["status"] == original["status"]
    assert replayed["integrity"]["counters"]["parseFailures"] == 1


def test_replay_needs_no_api_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = _llm_run(tmp_path, monkeypatch, lose_first=False, key=True)
    monkeypatch.delenv("SIMREPORT_TEST_REPLAY_KEY")
    report = replay_run(out)
    assert report.ok, report.summary()


def test_a_replay_that_cannot_run_is_an_error_not_a_mismatch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "refund_desk"
    shutil.copytree(EXAMPLE, root)
    out = make_run(tmp_path, root)
    shutil.rmtree(root / "assets")  # the asset library is gone: the replay cannot load
    report = replay_run(out)
    assert not report.ok
    assert report.error is not None and "manifest_unresolved" in report.error
    assert report.first_difference is None
    assert "replay failed" in report.summary() and "records differ" not in report.summary()
    parser = argparse.ArgumentParser(prog="simreport")
    register_cli(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["replay", str(out)])
    assert args.func(args) == 2
    assert "replay failed" in capsys.readouterr().out
