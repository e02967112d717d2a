"""What changed since the last build: provenance in audit.json, earlier audits kept in
history/, the comparison of two audits and its causes, `simreport diff`, and the copy into the
site."""

from __future__ import annotations

import copy
import html
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

import simreport
from simreport import api
from simreport.analysis.provenance import HISTORY_DIR, LAST_WRITTEN, kept_audits, provenance
from simreport.cli import main
from simreport.core.canonical import sha256_bytes
from simreport.core.errors import DocumentError, InputError
from simreport.core.files import write_json
from simreport.report.history import (
    HEADING,
    changes_since_previous,
    copy_history,
    diff_audits,
    diff_html,
    diff_lines,
    load_audit,
    previous,
    row_state,
)
from tests.support.studies import plan_text, write_study

METRIC = "cooperationRate"
MORALISED = "linguistic_framing=moralised"
RISK = "linguistic_framing=risk"
NEUTRAL = "linguistic_framing=neutral"


def _write_plan(folder: Path, name: str, replications: int, levels: list[str]) -> Path:
    plan = plan_text(replications=replications, levels=levels)
    return write_study(folder, plan=plan, plan_name=name).plan


def _build(plan: Path, out: Path) -> None:
    """Run and analyse a plan (the pages are another feature's business)."""
    simreport.audit(plan, out=out, analyse=False)
    simreport.analyse(out)


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One small offline audit (3 replications, framing moralised and risk). Copy before use."""
    folder = tmp_path_factory.mktemp("small")
    out = folder / "out"
    _build(_write_plan(folder, "audit.yaml", 3, ["moralised", "risk"]), out)
    return out


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same audit directory built twice: 3 replications of framing moralised and risk, then
    10 replications of moralised and neutral (neutral is the base's own wording)."""
    folder = tmp_path_factory.mktemp("rebuilt")
    out = folder / "out"
    _build(_write_plan(folder, "audit.yaml", 3, ["moralised", "risk"]), out)
    _build(_write_plan(folder, "audit.yaml", 10, ["moralised", "neutral"]), out)
    return out


def _copy(source: Path, tmp_path: Path) -> Path:
    target = tmp_path / "audit"
    shutil.copytree(source, target)
    return target


def _edit_runs(audit_dir: Path, condition_dir: str, value: float) -> None:
    for result in sorted((audit_dir / "runs" / condition_dir).glob("*/result.json")):
        doc = json.loads(result.read_text())
        doc["metrics"][METRIC] = value
        result.write_text(json.dumps(doc))


# --------------------------------------------------------------------------- provenance


def test_provenance_names_plan_kernel_models_and_scenarios(small: Path) -> None:
    audit = load_audit(small)
    record = audit["provenance"]
    conditions = json.loads((small / "conditions.json").read_text())
    manifests = [json.loads(p.read_text()) for p in sorted(small.glob("runs/*/*/manifest.json"))]
    assert len(manifests) == 9
    assert record["planHash"] == audit["plan"]["hash"]
    assert record["kernelFingerprints"] == sorted({m["kernelFingerprint"] for m in manifests})
    assert record["models"] == ["offline-base"]
    assert record["providers"] == ["offline"]
    assert list(record["conditions"]) == [c["id"] for c in conditions]
    for cond in conditions:
        assert record["conditions"][cond["id"]] == {
            "scenarioHash": cond["scenarioHash"],
            "inputs": {},
        }


def test_provenance_has_no_machine_paths_and_is_the_same_elsewhere(
    small: Path, tmp_path: Path
) -> None:
    moved = _copy(small, tmp_path)
    again = simreport.analyse(moved)
    assert str(small) not in json.dumps(again["provenance"])
    assert str(tmp_path) not in json.dumps(again["provenance"])
    assert (moved / "audit.json").read_bytes() == (small / "audit.json").read_bytes()


def test_provenance_lists_the_distinct_input_versions_of_a_condition(tmp_path: Path) -> None:
    conditions = [
        {"id": "base", "dir": "base", "scenarioHash": "s0", "replications": 3},
        {"id": "x=1", "dir": "x=1", "scenarioHash": "s1"},
    ]
    manifests = {
        ("base", 0): {"kernelFingerprint": "k2", "model": "m", "provider": "offline",
                      "assets": {"sim.py": "a1", "agent@1.2.0": "b1"},
                      "assetRoot": str(tmp_path)},
        ("base", 1): {"kernelFingerprint": "k1", "model": "m", "provider": "offline",
                      "assets": {"sim.py": "a2", "agent@1.2.0": "b1"}},
        # replication 2 of base never started: no manifest
        ("x=1", 0): {"kernelFingerprint": "k1", "model": "n", "provider": "openai",
                       "assets": {}},
        ("x=1", 1): {"kernelFingerprint": "k1", "model": "n", "provider": "openai"},
        # beyond the plan's replications: not part of this build
        ("x=1", 2): {"kernelFingerprint": "stale", "model": "old", "provider": "old"},
    }  # fmt: skip
    for (folder, r), doc in manifests.items():
        write_json(tmp_path / "runs" / folder / str(r) / "manifest.json", doc)
    record = provenance(tmp_path, conditions, {"hash": "p", "replications": 2})
    assert record == {
        "planHash": "p",
        "kernelFingerprints": ["k1", "k2"],
        "decisions": [],
        "models": ["m", "n"],
        "providers": ["offline", "openai"],
        "conditions": {
            "base": {"scenarioHash": "s0", "inputs": {"agent@1.2.0": "b1", "sim.py": ["a1", "a2"]}},
            "x=1": {"scenarioHash": "s1", "inputs": {}},
        },
    }
    assert str(tmp_path) not in json.dumps(record)


def test_a_manifest_that_is_not_json_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "runs" / "base" / "0" / "manifest.json"
    bad.parent.mkdir(parents=True)
    bad.write_text("{not json")
    conditions = [{"id": "base", "dir": "base", "scenarioHash": "s", "replications": 1}]
    with pytest.raises(InputError) as caught:
        provenance(tmp_path, conditions, {"hash": "p"})
    assert str(bad) in str(caught.value)


# --------------------------------------------------------------------------- history


def test_an_edited_run_keeps_the_previous_audit_once(small: Path, tmp_path: Path) -> None:
    audit_dir = _copy(small, tmp_path)
    before = (audit_dir / "audit.json").read_bytes()
    simreport.analyse(audit_dir)
    assert kept_audits(audit_dir) == [], "an identical rebuild keeps nothing"

    _edit_runs(audit_dir, "linguistic_framing=moralised", 0.1)
    simreport.analyse(audit_dir)
    kept = kept_audits(audit_dir)
    assert [p.name for p in kept] == [f"1-{sha256_bytes(before)[:12]}.json"]
    assert kept[0].read_bytes() == before
    assert previous(audit_dir) == json.loads(before)

    simreport.analyse(audit_dir)
    assert kept_audits(audit_dir) == kept, "an identical rebuild adds nothing"

    _edit_runs(audit_dir, "linguistic_framing=risk", 0.9)
    middle = (audit_dir / "audit.json").read_bytes()
    simreport.analyse(audit_dir)
    names = [p.name for p in kept_audits(audit_dir)]
    assert names == [kept[0].name, f"2-{sha256_bytes(middle)[:12]}.json"]


def test_an_audit_removed_before_the_build_is_still_kept(small: Path, tmp_path: Path) -> None:
    """Snakemake removes a job's outputs before it runs: the copy of the last audit written
    stands in for the removed audit.json."""
    audit_dir = _copy(small, tmp_path)
    simreport.analyse(audit_dir)
    before = (audit_dir / "audit.json").read_bytes()
    assert (audit_dir / HISTORY_DIR / LAST_WRITTEN).read_bytes() == before
    (audit_dir / "audit.json").unlink()
    _edit_runs(audit_dir, "linguistic_framing=moralised", 0.1)
    simreport.analyse(audit_dir)
    assert [p.read_bytes() for p in kept_audits(audit_dir)] == [before]
    assert (audit_dir / HISTORY_DIR / LAST_WRITTEN).read_bytes() == (
        audit_dir / "audit.json"
    ).read_bytes()


def test_a_file_that_is_not_an_audit_is_replaced_not_kept(small: Path, tmp_path: Path) -> None:
    audit_dir = _copy(small, tmp_path)
    (audit_dir / "audit.json").write_text("not an audit")
    shutil.rmtree(audit_dir / HISTORY_DIR, ignore_errors=True)
    simreport.analyse(audit_dir)
    assert kept_audits(audit_dir) == []
    assert previous(audit_dir) is None
    assert changes_since_previous(audit_dir, load_audit(audit_dir)) is None


def test_only_numbered_files_count_as_kept(tmp_path: Path) -> None:
    folder = tmp_path / HISTORY_DIR
    folder.mkdir()
    for name in ("10-aaaaaaaaaaaa.json", "2-bbbbbbbbbbbb.json", "notes.json", "3-short.json",
                 LAST_WRITTEN, "0-cccccccccccc.json"):  # fmt: skip
        (folder / name).write_text("{}")
    assert [p.name for p in kept_audits(tmp_path)] == [
        "2-bbbbbbbbbbbb.json",
        "10-aaaaaaaaaaaa.json",
    ]


# --------------------------------------------------------------------------- a changed plan


def test_a_changed_plan_names_the_plan_hash_and_the_conditions_that_moved(rebuilt: Path) -> None:
    new = load_audit(rebuilt)
    diff = changes_since_previous(rebuilt, new)
    assert diff is not None
    kept = kept_audits(rebuilt)
    assert len(kept) == 1 and diff["previousFile"] == f"history/{kept[0].name}"
    old = load_audit(kept[0])
    assert old["plan"]["replications"] == 3 and new["plan"]["replications"] == 10

    assert diff["identical"] is False
    assert diff["grade"]["old"] == "weak" and diff["grade"]["new"] == "moderate"
    assert diff["grade"]["changed"] is True
    assert diff["grade"]["reasonsRemoved"] == old["grade"]["reasons"]
    assert diff["conditions"] == {"added": [NEUTRAL], "removed": [RISK]}

    cause = diff["cause"]
    assert cause["status"] == "known"
    assert cause["planHash"] == {"old": old["plan"]["hash"], "new": new["plan"]["hash"]}
    assert cause["kernelFingerprints"] is None and cause["models"] is None
    # base and moralised read the same scenario in both builds
    assert cause["scenarioHashes"] == [] and cause["inputs"] == []

    moved = {row["condition"]: row for row in diff["moved"][METRIC]}
    assert list(moved) == [MORALISED]
    row = moved[MORALISED]
    assert row["changes"] == ["significance"]
    assert row["old"]["state"] == "not significant" and row["new"]["state"] == "significant"
    assert row["new"]["holmP"] < 0.05 <= row["old"]["holmP"]

    lines = diff_lines(diff)
    assert "Grade: weak → moderate." in lines
    assert f"New conditions: {NEUTRAL}." in lines
    assert f"Removed conditions: {RISK}." in lines
    label = next(c.get("label") for c in new["conditions"] if c["id"] == MORALISED)
    named = f"{METRIC}, {MORALISED}" + (f" ({label})" if label and label != MORALISED else "")
    assert any(line.startswith(f"{named}: not significant → significant") for line in lines)
    plan_line = next(line for line in lines if "plan's meaning changed" in line)
    assert old["plan"]["hash"][:12] in plan_line and new["plan"]["hash"][:12] in plan_line


def test_the_cli_prints_the_diff_of_two_directories_or_files(
    rebuilt: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kept = kept_audits(rebuilt)[0]
    assert main(["diff", str(kept), str(rebuilt)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == diff_lines(diff_audits(load_audit(kept), load_audit(rebuilt)))

    assert main(["diff", str(kept), str(rebuilt / "audit.json"), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(json.dumps(diff_audits(load_audit(kept), load_audit(rebuilt))))

    assert main(["diff", str(rebuilt), str(rebuilt)]) == 0
    same = diff_audits(load_audit(rebuilt), load_audit(rebuilt))
    assert same["identical"] is True
    assert capsys.readouterr().out.splitlines() == diff_lines(same)


@pytest.mark.parametrize(
    ("given", "kind", "named", "line"),
    [
        ("missing", DocumentError, "missing", None),
        ("runs", DocumentError, "runs/audit.json", None),
        ("plan.json", InputError, "plan.json", None),
        ("broken.json", DocumentError, "broken.json", 1),  # a JSON syntax error, located
    ],
)
def test_the_cli_names_a_file_that_is_not_an_audit(
    small: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    given: str,
    kind: type[InputError],
    named: str,
    line: int | None,
) -> None:
    (tmp_path / "plan.json").write_text('{"id": "p"}')
    (tmp_path / "broken.json").write_text("{not json")
    (tmp_path / "runs").mkdir()
    bad = tmp_path / given
    with pytest.raises(InputError) as caught:
        load_audit(bad)
    found = caught.value
    assert (type(found), found.file, found.line) == (kind, str(tmp_path / named), line)
    for argv in (["diff", str(bad), str(small)], ["diff", str(small), str(bad), "--json"]):
        assert main(argv) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        err = captured.err.strip().splitlines()
        assert len(err) == 1, err
        assert err[0] == f"simreport: {found.one_line()}"


# --------------------------------------------------------------------------- comparing


def _row(condition: str, **values: Any) -> dict[str, Any]:
    row = {"condition": condition, "holmP": 0.5, "diff": 0.1, "tested": True}
    row.update(values)
    return row


def _audit(rows: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    conditions = [{"id": "base", "isBase": True}] + [
        {"id": r["condition"], "label": r.pop("label", None)} for r in copy.deepcopy(rows)
    ]
    audit: dict[str, Any] = {
        "schemaVersion": 2,
        "plan": {"hash": "p" * 64},
        "grade": {"grade": "weak", "reasons": ["few replications"]},
        "metrics": [METRIC],
        "conditions": conditions,
        "tests": {METRIC: [{k: v for k, v in r.items() if k != "label"} for r in rows]},
        "software": {"simreport": "1.0"},
        "provenance": {
            "planHash": "p" * 64,
            "kernelFingerprints": ["k1"],
            "models": ["m1"],
            "providers": ["offline"],
            "conditions": {
                c["id"]: {"scenarioHash": f"s-{c['id']}", "inputs": {}} for c in conditions
            },
        },
    }
    audit.update(extra)
    return audit


def test_significance_and_direction_are_compared_row_by_row() -> None:
    old = _audit(
        [
            _row("a", holmP=0.01, diff=0.3),  # significant → not significant
            _row("b", holmP=0.2, diff=0.3),  # direction flips
            _row("c", holmP=0.01, diff=0.3),  # unchanged
            _row("d", holmP=0.01, diff=-0.3),  # tested → not tested
            _row("e", holmP=None, diff=None, tested=False),  # not tested → significant
            _row("f", holmP="nan", diff="nan", tested=False),  # stays not tested
        ]
    )
    new = _audit(
        [
            _row("a", holmP=0.3, diff=0.3),
            _row("b", holmP=0.2, diff=-0.3),
            _row("c", holmP=0.02, diff=0.2),
            _row("d", holmP=None, diff=None, tested=False, note="identical to the base"),
            _row("e", holmP=0.001, diff=0.4),
            _row("f", holmP=None, diff=None, tested=False),
        ]
    )
    moved = {r["condition"]: r for r in diff_audits(old, new)["moved"][METRIC]}
    assert list(moved) == ["a", "b", "d", "e"]
    assert moved["a"]["changes"] == ["significance"]
    assert (moved["a"]["old"]["state"], moved["a"]["new"]["state"]) == (
        "significant",
        "not significant",
    )
    assert moved["b"]["changes"] == ["direction"]
    assert (moved["b"]["old"]["direction"], moved["b"]["new"]["direction"]) == (
        "increase",
        "decrease",
    )
    assert moved["d"]["new"]["state"] == "not tested", "not tested is not 'not significant'"
    assert (
        moved["e"]["old"]["state"] == "not tested" and moved["e"]["new"]["state"] == "significant"
    )


def test_a_row_with_tested_false_is_not_tested_whatever_its_p() -> None:
    assert row_state({"holmP": 0.001, "diff": 1.0, "tested": False})["state"] == "not tested"
    assert row_state({"holmP": 0.001, "diff": 1.0})["state"] == "significant"
    assert row_state({"holmP": 0.05, "diff": 0.0})["state"] == "not significant"
    assert row_state({"holmP": 0.05, "diff": 0.0})["direction"] == "none"
    assert row_state(None) == {
        "state": "not tested",
        "holmP": None,
        "diff": None,
        "direction": None,
    }


def test_causes_name_kernel_models_scenarios_and_inputs() -> None:
    old = _audit([_row("a"), _row("b")])
    new = copy.deepcopy(old)
    new["provenance"]["kernelFingerprints"] = ["k2"]
    new["provenance"]["models"] = ["m1", "m2"]
    new["provenance"]["conditions"]["a"]["scenarioHash"] = "s-a2"
    new["provenance"]["conditions"]["b"]["inputs"] = {"agent@2.0.0": "d2"}
    new["software"] = {"simreport": "1.1"}
    cause = diff_audits(old, new)["cause"]
    assert cause["status"] == "known"
    assert cause["planHash"] is None
    assert cause["kernelFingerprints"] == {"old": ["k1"], "new": ["k2"]}
    assert cause["models"] == {"old": ["m1"], "new": ["m1", "m2"]}
    assert cause["providers"] is None
    assert cause["scenarioHashes"] == [{"condition": "a", "old": "s-a", "new": "s-a2"}]
    assert cause["inputs"] == [{"condition": "b", "input": "agent@2.0.0", "old": None, "new": "d2"}]
    assert cause["software"] == {"old": {"simreport": "1.0"}, "new": {"simreport": "1.1"}}
    lines = diff_lines(diff_audits(old, new))
    assert "Cause: kernel fingerprint changed ([k1] → [k2])." in lines
    assert "Cause: models changed ([m1] → [m1, m2])." in lines
    assert "Cause: the scenario changed for 1 condition: a." in lines
    assert "Cause: input agent@2.0.0 of b changed (none → d2)." in lines
    assert "The software that wrote the audit changed (simreport 1.0 → simreport 1.1)." in lines


def test_no_recorded_cause_is_said_as_such() -> None:
    old = _audit([_row("a", holmP=0.01)])
    new = _audit([_row("a", holmP=0.3)])
    lines = diff_lines(diff_audits(old, new))
    assert any(line.startswith("Cause: none recorded") for line in lines)


@pytest.mark.parametrize("missing", ["previous", "current"])
def test_an_audit_without_provenance_gives_an_unknown_cause(missing: str) -> None:
    old = _audit([_row("a")])
    new = _audit([_row("a", holmP=0.01)])
    del (old if missing == "previous" else new)["provenance"]
    diff = diff_audits(old, new)
    assert diff["cause"]["status"] == "unknown"
    assert diff["cause"]["missing"] == [missing]
    assert f"Cause: unknown (the {missing} audit records no provenance)." in diff_lines(diff)


def test_grade_reasons_metrics_and_identical_audits() -> None:
    old = _audit([_row("a")])
    assert diff_lines(diff_audits(old, copy.deepcopy(old))) == [
        "No changes: the two audits are identical."
    ]
    new = _audit([_row("a")], metrics=["payoff"])
    new["grade"] = {"grade": "moderate", "reasons": ["enough replications"]}
    diff = diff_audits(old, new)
    assert diff["metrics"] == {"added": ["payoff"], "removed": [METRIC]}
    assert diff["moved"] == {}
    lines = diff_lines(diff)
    assert lines[:3] == [
        "Grade: weak → moderate.",
        "New grade reason: enough replications",
        "Grade reason no longer given: few replications",
    ]
    assert "New metrics: payoff." in lines and f"Removed metrics: {METRIC}." in lines
    assert "No condition changed significance or direction." in lines


def test_the_html_fragment_is_escaped_and_has_no_scripts_or_styles() -> None:
    hostile = "<script>alert(1)</script>&\"'"
    old = _audit([_row(hostile, holmP=0.01, label="<b>bold\x07</b>")])
    new = _audit([_row(hostile, holmP=0.3, label="<b>bold\x07</b>")])
    diff = diff_audits(old, new)
    diff["previousFile"] = 'history/1-"<x>.json'
    fragment = diff_html(diff)
    assert fragment.startswith('<section id="changes"')
    assert fragment.endswith("</section>")
    assert f">{HEADING}</h2>" in fragment
    assert "<script" not in fragment and "<style" not in fragment and "style=" not in fragment
    assert "<b>" not in fragment and "&lt;b&gt;bold\u2407&lt;/b&gt;" in fragment
    assert "&lt;script&gt;" in fragment
    assert 'href="history/1-&quot;&lt;x&gt;.json"' in fragment
    assert fragment.count("<li>") == len(diff_lines(diff)) + 1
    assert "<h3 id=" in diff_html(diff, level=3)


# --------------------------------------------------------------------------- the site


def test_copy_history_keeps_earlier_builds_in_the_site(small: Path, tmp_path: Path) -> None:
    audit_dir = _copy(small, tmp_path)
    site_audit = tmp_path / "site" / "audit"
    assert copy_history(audit_dir, site_audit) == []
    _edit_runs(audit_dir, "linguistic_framing=moralised", 0.1)
    simreport.analyse(audit_dir)
    kept = kept_audits(audit_dir)
    copied = copy_history(audit_dir, site_audit)
    assert [p.name for p in copied] == [p.name for p in kept]
    assert all((site_audit / HISTORY_DIR / p.name).read_bytes() == p.read_bytes() for p in kept)
    assert not (site_audit / HISTORY_DIR / LAST_WRITTEN).exists()
    assert copy_history(audit_dir, site_audit) == [], "unchanged files are not written again"
    # the site keeps what the audit directory no longer has
    shutil.rmtree(audit_dir / HISTORY_DIR)
    assert copy_history(audit_dir, site_audit) == []
    assert [p.name for p in sorted((site_audit / HISTORY_DIR).iterdir())] == [kept[0].name]


def test_load_audit_refuses_what_is_not_an_audit(tmp_path: Path) -> None:
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(InputError) as refused:
        load_audit(tmp_path / "list.json")
    assert type(refused.value) is InputError  # read, but not an audit
    assert refused.value.file == str(tmp_path / "list.json")


def test_the_report_and_the_site_show_what_changed(rebuilt: Path, tmp_path: Path) -> None:
    """After a plan edit and a rebuild, the report opens with what moved and why, links the
    previous audit, and the site keeps that audit even once results/ is gone."""
    audit_dir = _copy(rebuilt, tmp_path)
    report = api.report(audit_dir).read_text()
    section = report[report.index('<section id="changes"') : report.index("</section>")]
    assert 'id="h-changes"' in section
    for line in diff_lines(
        changes_since_previous(audit_dir, json.loads((audit_dir / "audit.json").read_text()))
    ):
        assert html.escape(line) in section
    assert "plan" in section.lower() and "neutral" in section
    kept = kept_audits(audit_dir)
    assert f'href="history/{kept[-1].name}"' in section
    assert report.index('id="changes"') < report.index('id="plan-summary"')

    site = tmp_path / "site"
    api.site([audit_dir], out=site)
    plan_id = json.loads((audit_dir / "audit.json").read_text())["plan"]["id"]
    copied = site / plan_id / "history" / kept[-1].name
    assert copied.read_bytes() == kept[-1].read_bytes()
    shutil.rmtree(audit_dir)
    assert copied.is_file()
