"""Evaluation is a step of its own (design §三 "仿真不评分"): a run writes records, observations,
evidence and completeness and leaves `status.quality` null; `simreport evaluate` reads those
outputs and writes evaluation.json with the evaluator's version and sha256, linked by quality_ref;
altered or missing material gives undecidable criteria or a located error, never a verdict."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import yaml

from simreport.cli import main
from simreport.core.canonical import sha256_bytes
from simreport.core.errors import EXIT_INPUT, EXIT_OK, InputError, SimreportError
from simreport.core.quality_ref import QUALITY_REF_PREFIX, quality_ref, quality_ref_problem
from simreport.evaluation import (
    DEFAULT_EVALUATOR,
    EVALUATORS,
    NotEvaluable,
    RunLayers,
    evaluate_run,
    judge,
)
from simreport.kernel.testbed.assets import AssetLibrary, EvaluationSpecAsset
from simreport.ledger import connect
from simreport.ledger import tables as t
from simreport.ledger.errors import NotRecorded
from simreport.ledger.evaluations import record_evaluation
from tests.support.refusals import refused

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "refund_desk"
PRE_SPLIT = Path(__file__).resolve().parents[1] / "fixtures" / "evaluation_pre_split_run"
"""A run made while the run still judged itself: its layers, and the evaluation.json the run
wrote then (`in-run-evaluation.json`)."""
SPEC_FILE = Path("assets") / "refund-assertions" / "1.1.0.yaml"
VERDICT_METRICS = {"resolved", "verifiedBeforeRetry", "correctAmount"}


def load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> SimreportError:
    refusal = refused(capsys, argv)
    assert refusal.code == EXIT_INPUT, refusal.line
    return refusal.error


@pytest.fixture(scope="module")
def desk(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the example folder (scenario and asset library)."""
    root = tmp_path_factory.mktemp("desk") / "refund_desk"
    shutil.copytree(EXAMPLE, root)
    return root


@pytest.fixture(scope="module")
def run_dir(desk: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("run") / "run"
    code = main(["run", str(desk / "scenario.yaml"), "--out", str(out), "--no-ledger"])
    assert code == EXIT_OK
    return out


def copy_run(run: Path, to: Path) -> Path:
    shutil.copytree(run, to)
    (to / "evaluation.json").unlink(missing_ok=True)
    return to


def pre_split_run(to: Path, asset_root: Path = EXAMPLE) -> Path:
    """The pre-split run, its manifest pointing at `asset_root` (assetRoot is not locked)."""
    shutil.copytree(PRE_SPLIT, to)
    manifest = load(to / "manifest.json")
    manifest["assetRoot"] = str(asset_root)
    (to / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return to


# --------------------------------------------------------------------------- the run judges nothing


def test_a_run_writes_no_verdict(run_dir: Path) -> None:
    assert not (run_dir / "evaluation.json").exists()
    for layer in ("records.jsonl", "observations.json", "evidence.json", "completeness.json"):
        assert (run_dir / layer).is_file(), layer
    result = load(run_dir / "result.json")
    assert result["status"]["quality"] is None
    # Its metrics are facts counted from the observations; pass/fail-like ones are gone.
    assert not VERDICT_METRICS & set(result["metrics"])
    assert {"blindRetries", "wrongAmountRefunds", "acceptedAndSatisfied"} <= set(result["metrics"])
    # The run states its validity as a fact of its own records, for the audit's exclusion reasons.
    records = [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]
    (validity,) = [r for r in records if r["type"] == "run.validity"]
    assert validity["payload"] == {"validity": "valid", "problems": []}


def test_the_kernel_does_not_import_the_evaluation() -> None:
    kernel = ROOT / "simreport" / "kernel"
    assert not (kernel / "testbed" / "evaluation.py").exists()
    for path in kernel.rglob("*.py"):
        assert "evaluation import" not in path.read_text(encoding="utf-8"), path


# --------------------------------------------------------------------------- simreport evaluate


def test_evaluate_writes_verdicts_with_the_evaluator_and_spec_digests(
    run_dir: Path, desk: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = copy_run(run_dir, tmp_path / "run")
    result_before = (run / "result.json").read_bytes()
    assert main(["evaluate", str(run)]) == EXIT_OK
    said = capsys.readouterr().out
    doc = load(run / "evaluation.json")
    assert doc["qualityRef"] in said
    # The evaluator: name, version and the sha256 over the bytes of its named sources.
    name, version = DEFAULT_EVALUATOR.split("@")
    assert (doc["evaluator"]["name"], doc["evaluator"]["version"]) == (name, version)
    digest = hashlib.sha256()
    for source in ("evaluation/extraction.py", "evaluation/judgement.py", "evaluation/layers.py"):
        data = (ROOT / "simreport" / source).read_bytes()
        digest.update(f"{source}\0{sha256_bytes(data)}\0".encode())
    assert doc["evaluator"]["sha256"] == digest.hexdigest()
    # The spec: the version and sha256 the manifest locked, which is the file's.
    locked = load(run / "manifest.json")["resolved"]["evaluationRef.assertions"]
    assert (
        doc["spec"]["sha256"] == locked["sha256"] == sha256_bytes((desk / SPEC_FILE).read_bytes())
    )
    assert doc["spec"]["version"] == locked["version"]
    # The link: qualityRef over the document's own content; the run's result.json untouched.
    assert doc["qualityRef"].startswith(QUALITY_REF_PREFIX)
    assert doc["qualityRef"] == quality_ref(doc) and quality_ref_problem(doc) is None
    assert (run / "result.json").read_bytes() == result_before
    assert load(run / "result.json")["status"]["quality"] is None
    assert doc["run"]["inputs"]["result.json"] == sha256_bytes(result_before)
    # Verdicts follow the observed facts.
    facts = {o["factKey"]: o["value"] for o in load(run / "observations.json")["observations"]}
    expected = "pass" if facts["refund.count"] <= 1 else "fail"
    assert doc["criteria"]["no_duplicate_refund"]["verdict"] == expected
    # Evaluating again gives the same bytes (no clock in it).
    before = (run / "evaluation.json").read_bytes()
    assert main(["evaluate", str(run)]) == EXIT_OK
    assert (run / "evaluation.json").read_bytes() == before


def test_verdicts_equal_those_the_run_used_to_write(tmp_path: Path) -> None:
    # The pre-split run kept no records.jsonl, so its folder can no longer be judged (below);
    # judged as its layers say, it gets the verdicts it gave itself.
    folder = pre_split_run(tmp_path / "run")
    spec = AssetLibrary(EXAMPLE / "assets").resolve(
        "refund-assertions@1.1.0", "evaluation_spec", "evaluationRef.assertions"
    )
    typed = spec.typed(EvaluationSpecAsset)
    layers = RunLayers.from_documents(
        typed,
        observations=load(folder / "observations.json"),
        evidence=load(folder / "evidence.json"),
        completeness=load(folder / "completeness.json"),
        validity=load(folder / "result.json")["status"]["validity"],
    )
    new, old = judge(typed, layers), load(folder / "in-run-evaluation.json")
    assert {k: v["verdict"] for k, v in new["criteria"].items()} == {
        "correct_amount": "pass",
        "no_complaint": "fail",
        "no_duplicate_refund": "fail",
        "resolved": "pass",
        "verified_before_retry": "fail",
    }
    for key, item in old["criteria"].items():
        for field in ("verdict", "reason", "check", "observationIds", "evidenceRefs"):
            assert new["criteria"][key][field] == item[field], (key, field)
    assert spec.sha256 == old["spec"]["sha256"]
    for check in ("recordsComplete", "runValid", "evidenceSufficient"):
        assert new["checks"][check] == old["checks"][check], check
    assert new["undecidable"] == []
    # Without records its observations cannot be checked: every criterion is undecidable.
    assert main(["evaluate", str(folder)]) == EXIT_OK
    doc = load(folder / "evaluation.json")
    assert {u["failedCheck"] for u in doc["undecidable"]} == {"layersReadable"}
    (problem,) = doc["checks"]["layersReadable"]["problems"]
    assert problem.startswith("records.jsonl missing")
    assert doc["run"]["inputs"]["records.jsonl"] is None


# --------------------------------------------------------------------------- missing or altered


def test_missing_layers_make_every_criterion_undecidable(run_dir: Path, tmp_path: Path) -> None:
    run = copy_run(run_dir, tmp_path / "run")
    (run / "observations.json").unlink()
    assert main(["evaluate", str(run)]) == EXIT_OK
    doc = load(run / "evaluation.json")
    assert {c["verdict"] for c in doc["criteria"].values()} == {"undecidable"}
    assert {u["failedCheck"] for u in doc["undecidable"]} == {"layersReadable"}
    assert doc["checks"]["layersReadable"]["problems"] == ["observations.json missing"]
    assert doc["run"]["inputs"]["observations.json"] is None


def test_layers_that_disagree_make_every_criterion_undecidable(
    run_dir: Path, tmp_path: Path
) -> None:
    # evidence.json claims an observation observations.json does not back, in a run that
    # recorded no digests of its layers (as runs did before they were recorded): its layers
    # disagree. (Edited where the run recorded them, it is refused: test_evaluation_tampering.)
    run = copy_run(run_dir, tmp_path / "evidence")
    manifest = load(run / "manifest.json")
    del manifest["layerSha256"]
    (run / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    evidence = load(run / "evidence.json")
    evidence["criteria"]["no_duplicate_refund"]["observationIds"] = ["o0001"]
    (run / "evidence.json").write_text(json.dumps(evidence), encoding="utf-8")
    assert main(["evaluate", str(run)]) == EXIT_OK
    doc = load(run / "evaluation.json")
    assert {c["verdict"] for c in doc["criteria"].values()} == {"undecidable"}
    assert {u["failedCheck"] for u in doc["undecidable"]} == {"layersConsistent"}
    assert any(
        "criteria.no_duplicate_refund.observationIds" in p
        for p in doc["checks"]["layersConsistent"]["problems"]
    )


def test_a_manifest_altered_after_the_run_is_refused(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = copy_run(run_dir, tmp_path / "run")
    assert main(["evaluate", str(run)]) == EXIT_OK
    manifest = load(run / "manifest.json")
    manifest["resolved"]["evaluationRef.assertions"]["version"] = "9.9.9"
    (run / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    capsys.readouterr()
    error = _refused(capsys, ["evaluate", str(run)])
    assert (error.file, error.path) == (str(run / "manifest.json"), "manifestSha256")
    # No verdict outlives the material it was made from.
    assert not (run / "evaluation.json").exists()


def test_an_evaluation_spec_changed_since_the_run_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    library = tmp_path / "desk"
    shutil.copytree(EXAMPLE, library)
    spec = library / SPEC_FILE
    spec.write_text(spec.read_text(encoding="utf-8") + "\n# edited\n", encoding="utf-8")
    run = pre_split_run(tmp_path / "run", asset_root=library)
    error = _refused(capsys, ["evaluate", str(run)])
    # The spec file is there, but not as the run resolved it.
    assert (error.file, error.path) == (
        str(spec),
        "manifest.json resolved.evaluationRef.assertions",
    )
    # Gone altogether: named, with the version the manifest locked.
    spec.unlink()
    error = _refused(capsys, ["evaluate", str(run)])
    assert error.path == "manifest.json resolved.evaluationRef.assertions"
    assert error.expected is not None and "refund-assertions@1.1.0" in error.expected


def test_what_is_not_an_evaluable_run_is_refused(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = copy_run(run_dir, tmp_path / "run")
    (run / "result.json").unlink()
    error = _refused(capsys, ["evaluate", str(run)])
    assert isinstance(error, NotEvaluable) and error.file == str(run / "result.json")
    error = _refused(capsys, ["evaluate", str(tmp_path / "nowhere")])
    assert (type(error), error.file) == (InputError, str(tmp_path / "nowhere"))
    # A run of a world without an evaluator: nothing to evaluate.
    other = tmp_path / "pd"
    scenario = ROOT / "examples" / "prisoners_dilemma" / "scenario.yaml"
    assert main(["run", str(scenario), "--out", str(other), "--no-ledger"]) == EXIT_OK
    capsys.readouterr()
    error = _refused(capsys, ["evaluate", str(other)])
    assert isinstance(error, NotEvaluable) and error.file == str(other / "manifest.json")
    assert error.path == "resolved.evaluationRef.assertions"


def test_an_unknown_evaluator_is_refused_listing_the_known_ones(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    error = _refused(capsys, ["evaluate", str(run_dir), "--evaluator", "judge@2"])
    assert error.path == "--evaluator" and "'judge@2'" in error.message
    for known in EVALUATORS:
        assert error.expected is not None and known in error.expected
    assert not (run_dir / "evaluation.json").exists()


# --------------------------------------------------------------------------- audits and the ledger


def small_plan(desk: Path) -> Path:
    plan = {
        "baseScenario": "scenario.yaml",
        "design": "one_at_a_time",
        "replications": 1,
        "metrics": ["duplicateRefunds", "blindRetries", "acceptedAndSatisfied"],
        "axes": [
            {
                "template": "agent_specification",
                "id": "user_patience",
                "target": "user.persona.patience",
                "levels": ["medium", "high"],
            }
        ],
    }
    path = desk / "small.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False), encoding="utf-8")
    return path


def test_evaluating_an_audit_judges_every_run_and_reaches_audit_json(
    desk: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "audit"
    assert main(["audit", str(small_plan(desk)), "--out", str(out), "--no-ledger"]) == EXIT_OK
    conditions = load(out / "conditions.json")
    audit = load(out / "audit.json")
    runs = [out / "runs" / c["dir"] / "0" for c in conditions]
    rows = {(r["condition"], r["replication"]): r for r in audit["runs"]}
    for cond, run in zip(conditions, runs, strict=True):
        evaluation = load(run / "evaluation.json")
        assert load(run / "result.json")["status"]["quality"] is None
        # audit.json resolves the link from evaluation.json.
        assert rows[(cond["id"], 0)]["status"]["quality"] == evaluation["qualityRef"]
        assert load(out / "evaluations" / f"{cond['dir']}.json")["evaluated"] == 1
    (evaluator,) = audit["testbed"]["evaluators"]
    assert f"{evaluator['name']}@{evaluator['version']}" == DEFAULT_EVALUATOR
    assert evaluator["runs"] == len(runs)
    summary = load(out / "evaluations.json")
    assert summary["evaluated"] == summary["runs"] == len(runs)
    assert DEFAULT_EVALUATOR.split("@")[0] in (out / "report.html").read_text(encoding="utf-8")
    # `simreport evaluate AUDIT_DIR` again: the same evaluations, byte for byte.
    before = [(run / "evaluation.json").read_bytes() for run in runs]
    assert main(["evaluate", str(out)]) == EXIT_OK
    assert str(out / "evaluations.json") in capsys.readouterr().out
    assert load(out / "evaluations.json")["evaluated"] == len(runs)
    assert [(run / "evaluation.json").read_bytes() for run in runs] == before
    # An evaluation edited afterwards (or made from another result.json) does not count.
    doc = load(runs[0] / "evaluation.json")
    item = doc["criteria"]["no_duplicate_refund"]
    item["verdict"] = "fail" if item["verdict"] == "pass" else "pass"
    (runs[0] / "evaluation.json").write_text(json.dumps(doc), encoding="utf-8")
    assert main(["analyse", str(out), "--no-ledger"]) == EXIT_OK
    audit = load(out / "audit.json")
    row = next(r for r in audit["testbed"]["conditions"] if r["condition"] == conditions[0]["id"])
    assert row["notEvaluated"] == 1 and row["evaluated"] == 0
    assert audit["testbed"]["evaluators"][0]["runs"] == len(runs) - 1
    # A run that never finished has nothing to judge: listed, not refused; its stale evaluation
    # goes. An altered manifest is refused once the other runs are judged.
    (runs[1] / "result.json").unlink()
    assert main(["evaluate", str(out)]) == EXIT_OK
    summary = load(out / "evaluations.json")
    assert (summary["evaluated"], summary["notEvaluable"], summary["errors"]) == (2, 1, 0)
    assert not (runs[1] / "evaluation.json").exists()
    manifest = load(runs[2] / "manifest.json")
    manifest["seed"] = 12345
    (runs[2] / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    capsys.readouterr()
    error = _refused(capsys, ["evaluate", str(out)])
    # Named in the audit's summary of evaluations; the first problem is the altered manifest.
    assert error.file == str(out / "evaluations.json") and "manifestSha256" in error.message
    assert (runs[0] / "evaluation.json").is_file() and not (runs[2] / "evaluation.json").exists()
    assert load(out / "evaluations.json")["errors"] == 1


def test_the_ledger_links_a_run_to_its_evaluation(
    run_dir: Path, desk: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    run = tmp_path / "run"
    assert main(["run", str(desk / "scenario.yaml"), "--out", str(run), "--ledger", url]) == 0
    engine = connect(url)

    def quality_refs() -> list[Any]:
        with engine.connect() as conn:
            return [row.quality_ref for row in conn.execute(sa.select(t.run.c.quality_ref))]

    assert quality_refs() == [None]  # the run never sets it
    assert main(["evaluate", str(run), "--ledger", url]) == EXIT_OK
    ref = load(run / "evaluation.json")["qualityRef"]
    assert quality_refs() == [ref]
    assert record_evaluation(engine, run) == ref  # the same link again: accepted
    with engine.begin() as conn:
        conn.execute(sa.update(t.run).values(quality_ref=QUALITY_REF_PREFIX + "0" * 64))
    # A link to an earlier evaluation (another evaluator version) follows the folder's.
    assert record_evaluation(engine, run) == ref
    assert quality_refs() == [ref]
    # A run the ledger does not hold: the evaluation is written, the ledger says it missed it.
    other = copy_run(run_dir, tmp_path / "unrecorded")
    capsys.readouterr()
    assert main(["evaluate", str(other), "--ledger", url]) == 4
    assert str(other) in capsys.readouterr().err and (other / "evaluation.json").is_file()
    with pytest.raises(NotRecorded):  # why it missed it
        record_evaluation(engine, other)
    engine.dispose()


# --------------------------------------------------------------------------- the workflow


@pytest.mark.slow
def test_the_workflow_evaluates_each_condition_in_one_job_and_matches_the_cli(
    tmp_path: Path,
) -> None:
    import subprocess

    from tests.e2e.test_workflow import BIN, SNAKEMAKE, _env, snakemake
    from tests.support.workflow_copy import copy_workflow

    if not SNAKEMAKE.exists():
        pytest.skip("snakemake is not installed next to python")
    # Run jobs in two batches (`runJobs`): each evaluation job still judges one condition, and
    # asks for its batch's summary.
    config = {"plans": ["examples/refund_desk/small.yaml"], "runJobs": 2}
    dest = copy_workflow(tmp_path / "wf", config, examples=True)
    small_plan(dest / "examples" / "refund_desk")
    jobs, out = snakemake(dest)
    audit_dir = dest / "results" / "refund_desk"
    conditions = load(audit_dir / "conditions.json")
    assert len(conditions) > 2
    assert all(k.startswith("run_refund_desk_batch_") for k in jobs if k.startswith("run_"))
    assert sum(k.startswith("run_") for k in jobs) == 2, out[-3000:]
    # One evaluation job per condition, not one per run, before the analysis.
    assert jobs["evaluate"] == len(conditions), out[-3000:]
    audit = load(audit_dir / "audit.json")
    rows = {(r["condition"], r["replication"]): r for r in audit["runs"]}
    for cond in conditions:
        run = audit_dir / "runs" / cond["dir"] / "0"
        evaluation = load(run / "evaluation.json")
        assert load(run / "result.json")["status"]["quality"] is None
        assert rows[(cond["id"], 0)]["status"]["quality"] == evaluation["qualityRef"]
        assert load(audit_dir / "evaluations" / f"{cond['dir']}.json")["evaluated"] == 1
    assert audit["testbed"]["evaluators"][0]["runs"] == len(conditions)
    assert load(audit_dir / "evaluations.json")["evaluated"] == len(conditions)
    # The ledger links each recorded run to its evaluation.
    engine = connect(f"sqlite:///{dest / 'results' / 'ledger.sqlite'}")
    with engine.connect() as conn:
        refs = {row.quality_ref for row in conn.execute(sa.select(t.run.c.quality_ref))}
    engine.dispose()
    assert refs == {r["status"]["quality"] for r in audit["runs"]}
    # Nothing changed: nothing reruns, the evaluations included.
    jobs, out = snakemake(dest)
    assert "evaluate" not in jobs, out[-2000:]
    # `simreport audit` (in one process) gives the same audit.json.
    proc = subprocess.run(
        [
            str(BIN / "simreport"),
            "audit",
            "examples/refund_desk/small.yaml",
            "--out",
            str(tmp_path / "cli"),
            "--no-ledger",
        ],
        cwd=dest,
        env=_env(dest),
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "cli" / "audit.json").read_bytes() == (audit_dir / "audit.json").read_bytes()


# --------------------------------------------------------------------------- runs of the fact model

FACT_MODEL_RUN = Path(__file__).resolve().parents[1] / "fixtures" / "refund_desk_fact_model_run"
"""A refund-desk run recorded while the desk had a hand-written fact model (its snapshot holds
`orders` and `refunds`), its refund held and then refunded twice, with the evaluation.json of
its time (`fact-model-evaluation.json`)."""


def test_a_run_of_the_fact_model_is_evaluated_as_it_was_then(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(FACT_MODEL_RUN, run)
    manifest = load(run / "manifest.json")
    manifest["assetRoot"] = str(EXAMPLE)
    (run / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    then = load(run / "fact-model-evaluation.json")["criteria"]
    now = evaluate_run(run)["criteria"]  # its observations recomputed from its records
    assert {k: v["verdict"] for k, v in now.items()} == {k: v["verdict"] for k, v in then.items()}
    assert now["no_duplicate_refund"]["verdict"] == "fail"
    assert now["verified_before_retry"]["verdict"] == "fail"
