"""The Snakemake workflow, end to end through the real `snakemake` on a temporary copy:
the full build, no-op runs, incremental rebuilds (SPEC §1, §7), parity with `simreport audit`,
Snakemake's own report (`--report`), and a cluster executor whose jobs are separate processes."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support.workflow_copy import copy_workflow

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SNAKEMAKE = BIN / "snakemake"
PLANS = ("examples/prisoners_dilemma/audit.yaml", "examples/echo_chamber/audit.yaml")
REPORTED = ("prisoners_dilemma", "echo_chamber")
"""The plans by their ids."""

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not SNAKEMAKE.exists(), reason="snakemake is not installed next to python"),
]


def _copy(dest: Path) -> Path:
    # A config of the tests' own: the user's config/config.yaml (its plans) is never read.
    return copy_workflow(dest, {"plans": list(PLANS), "replications": 3}, examples=True)


def _env(dest: Path) -> dict[str, str]:
    env = dict(os.environ)
    # The copy's package is imported (also by spawned run workers), so editing its code counts.
    env["PYTHONPATH"] = str(dest)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def run_snakemake(
    dest: Path, *args: str, timeout: float | None = None
) -> subprocess.CompletedProcess[str]:
    """`snakemake --cores 2 ARGS` in `dest` with the copy's package; the finished process."""
    return subprocess.run(
        [str(SNAKEMAKE), "--cores", "2", *args],
        cwd=dest,
        env=_env(dest),
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )


def snakemake(dest: Path, *args: str, check: bool = True) -> tuple[dict[str, int], str]:
    """Run snakemake in `dest`; return the job counts per rule and the output."""
    proc = run_snakemake(dest, *args)
    out = proc.stdout + proc.stderr
    if check:
        assert proc.returncode == 0, out[-4000:]
    jobs: dict[str, int] = {}
    if "Job stats:" in out:
        table = out.split("Job stats:", 1)[1]
        for line in table.splitlines()[3:]:
            match = re.match(r"^(\S+)\s+(\d+)$", line.strip())
            if not match or match.group(1) == "total":
                break
            jobs[match.group(1)] = int(match.group(2))
    return jobs, out


def _run_logs(dest: Path, plan: str) -> dict[str, dict[str, str]]:
    """The run summary (a job log's last line) of every condition in the plan's current
    conditions.json."""
    current = json.loads((dest / "results" / plan / "conditions.json").read_text())
    logs = {}
    for condition in current:
        path = dest / "results" / plan / "logs" / "runs" / f"{condition['dir']}.log"
        text, rest = path.read_text().strip().splitlines()[-1].rsplit(": ", 1)
        assert text == condition["id"]
        logs[text] = dict(part.split("=", 1) for part in rest.split())
    return logs


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = _copy(tmp_path_factory.mktemp("workflow"))
    jobs, out = snakemake(dest)
    assert jobs["all"] == 1 and jobs["site"] == 1, out[-3000:]
    return dest


def test_full_build_writes_the_site(built: Path) -> None:
    site = built / "site"
    assert (site / "index.html").exists()
    for plan in ("prisoners_dilemma", "echo_chamber"):
        for name in ("report.html", "methods.html", "methods.md", "audit.json"):
            assert (site / plan / name).exists(), (plan, name)
        figures = list((built / "results" / plan / "figures").glob("*.svg"))
        assert any(f.name == "sensitivity.svg" for f in figures)
        runs = list((built / "results" / plan / "runs").glob("*/*/result.json"))
        conditions = json.loads((built / "results" / plan / "conditions.json").read_text())
        assert len(runs) == 3 * len(conditions)
    index = (site / "index.html").read_text()
    assert "prisoners_dilemma/report.html" in index and "echo_chamber/report.html" in index
    # Each report opens with the audit's own headline, and every page names who decided.
    from markupsafe import escape

    from simreport.analysis.provenance import OFFLINE_STAND_IN

    for plan in ("prisoners_dilemma", "echo_chamber"):
        audit = json.loads((site / plan / "audit.json").read_text())
        headline = str(escape(audit["verdict"]["headline"]))
        report = (site / plan / "report.html").read_text()
        assert report.index(headline) < report.index('id="h-plan-summary"')
        assert headline in index
        for page in (report, (site / plan / "methods.html").read_text(), index):
            assert OFFLINE_STAND_IN in page


def test_nothing_changed_runs_nothing(built: Path) -> None:
    # Python names every module it imports: checking the params of every job never needs pandas.
    env = {**_env(built), "PYTHONPROFILEIMPORTTIME": "1"}
    proc = subprocess.run(
        [str(SNAKEMAKE), "--cores", "2"], cwd=built, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0 and "Nothing to be done" in proc.stderr, proc.stderr[-2000:]
    imported = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()]
    assert "snakemake.persistence" in imported and "pandas" not in imported


def _runtime_closure(requirements: list[str]) -> set[str]:
    """Every distribution a plain `pip install .` brings in for these requirements: their
    installed metadata followed down, environment markers evaluated, extras only where a
    requirement names them (`psycopg[binary]`)."""
    seen: set[str] = set()
    todo = [Requirement(text) for text in requirements]
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        extras = sorted(requirement.extras)
        for extra in extras or [""]:
            key = f"{name}[{extra}]"
            if key in seen:
                continue
            seen.add(key)
            for text in importlib.metadata.requires(requirement.name) or []:
                child = Requirement(text)
                if child.marker is None or child.marker.evaluate({"extra": extra}):
                    todo.append(child)
    return {key.split("[", 1)[0] for key in seen}


def test_report_dependencies_come_with_a_plain_install() -> None:
    """The quick start's first step installs without `[dev]`: the modules Snakemake's report
    imports (pygments, which Snakemake lists only under its `reports` extra) must come with
    simreport's own dependencies, not by chance with the test tools."""
    import snakemake.report.html_reporter

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    closure = _runtime_closure(project["dependencies"])
    assert "snakemake" in closure
    assert "pygments" in closure
    # Snakemake alone does not bring it (the check is not vacuous), and the project pins it
    # itself rather than through another dependency that happens to need it today.
    (snakemake,) = [d for d in project["dependencies"] if Requirement(d).name == "snakemake"]
    assert "pygments" not in _runtime_closure([snakemake])
    assert "pygments" in {canonicalize_name(Requirement(d).name) for d in project["dependencies"]}


def _report_data(html: str, name: str) -> dict:  # type: ignore[type-arg]
    """A JSON object the report page declares as `var <name> = {...};`."""
    match = re.search(rf"^\s*var {name} = (\{{.*\}});\s*$", html, re.MULTILINE)
    assert match, f"no {name} in the report"
    data: dict = json.loads(match.group(1))  # type: ignore[type-arg]
    return data


def test_snakemake_report_holds_every_audit_with_captions(built: Path, tmp_path: Path) -> None:
    """`snakemake --report report.zip` on a copy of the finished build: Snakemake's own report
    holds every audit's report.html, figures, methods and audit.json, each under its plan's
    category with its caption."""
    dest = tmp_path / "flow"
    shutil.copytree(built, dest, symlinks=True)
    proc = run_snakemake(dest, "--report", "report.zip", timeout=900)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]

    with zipfile.ZipFile(dest / "report.zip") as archive:
        names = archive.namelist()
        html = archive.read("report/report.html").decode()
        results = _report_data(html, "results")
        categories = _report_data(html, "categories")
        # every file the report lists is in the archive, byte for byte
        for path, entry in results.items():
            assert archive.read(f"report/{entry['data_uri']}") == (dest / path).read_bytes()
    assert "report/report.html" in names

    # The workflow's description (report/workflow.rst) opens the report.
    opening = " ".join((dest / "report" / "workflow.rst").read_text().split()[:3])
    assert opening in html
    assert set(categories) == set(REPORTED)
    for plan in REPORTED:
        out = dest / "results" / plan
        figures = sorted(f"results/{plan}/figures/{f.name}" for f in out.glob("figures/*.svg"))
        assert figures and f"results/{plan}/figures/sensitivity.svg" in figures
        assert {kind: sorted(files) for kind, files in categories[plan].items()} == {
            "Report": [f"results/{plan}/report.html"],
            "Methods": [f"results/{plan}/methods.html", f"results/{plan}/methods.md"],
            "Figures": figures,
            "Data": [f"results/{plan}/audit.json"],
        }
        captions = {
            f"results/{plan}/report.html": "The audit report of plan",
            f"results/{plan}/methods.md": "The methods paragraphs of plan",
            f"results/{plan}/methods.html": "The methods paragraphs of plan",
            f"results/{plan}/audit.json": "The analysis of plan",
            f"results/{plan}/figures/sensitivity.svg": "Sensitivity ranking of plan",
        }
        for figure in figures:
            if "/effects-" in figure:
                captions[figure] = "Effects against the base in plan"
            elif "/distribution-" in figure:
                captions[figure] = "Distribution against the target in plan"
        for path, opening in captions.items():
            caption = results[path]["caption"]
            # the caption names its plan (filled in from the job's wildcards or params)
            assert caption.startswith(f"<p>{opening}") and plan in caption, (path, caption)
        assert results[f"results/{plan}/report.html"]["mime_type"] == "text/html"
        assert all(results[f]["mime_type"] == "image/svg+xml" for f in figures)


def test_concurrency_and_reformatting_rerun_nothing(built: Path, tmp_path: Path) -> None:
    plan_file = built / "examples" / "prisoners_dilemma" / "audit.yaml"
    original = plan_file.read_text()
    data = yaml.safe_load(original)
    data["concurrency"] = 7
    # Same meaning, different text: flow style, other key order, no comments.
    plan_file.write_text(json.dumps(dict(reversed(list(data.items()))), indent=1))
    try:
        jobs, out = snakemake(built, "--dry-run")
        assert jobs == {}, out[-2000:]
    finally:
        plan_file.write_text(original)


def test_editing_one_axis_reruns_only_what_it_touched(built: Path) -> None:
    plan_file = built / "examples" / "prisoners_dilemma" / "audit.yaml"
    original = plan_file.read_text()
    plan_file.write_text(
        original.replace("levels: [moralised, risk]", "levels: [moralised, neutral]")
    )
    try:
        jobs, _ = snakemake(built)
        runs = {k: v for k, v in jobs.items() if k.startswith("run_")}
        assert len(runs) == 1 and next(iter(runs)).startswith("run_prisoners_dilemma_"), jobs
        assert jobs == {
            "plan_spec": 1,
            next(iter(runs)): 1,
            "analyse": 1,
            "figures_prisoners_dilemma": 1,
            "report": 1,
            "methods": 1,
            "site": 1,
            "all": 1,
        }, jobs
        logs = _run_logs(built, "prisoners_dilemma")
        assert logs["linguistic_framing=neutral"]["computed"] == "3"
    finally:
        plan_file.write_text(original)
    # Back to the original plan: the removed condition's folder comes back from the run store,
    # nothing is computed again.
    jobs, _ = snakemake(built)
    assert [k for k in jobs if k.startswith("run_")] == [
        "run_prisoners_dilemma_linguistic_framing_risk"
    ], jobs
    assert _run_logs(built, "prisoners_dilemma")["linguistic_framing=risk"]["computed"] == "0"
    assert jobs["analyse"] == 1


def _set_config(dest: Path, **values: object) -> None:
    path = dest / "config" / "config.yaml"
    config = yaml.safe_load(path.read_text())
    config.update(values)
    path.write_text(yaml.safe_dump(config, sort_keys=False))


def test_more_replications_run_only_the_new_ones(built: Path) -> None:
    _set_config(built, overrides={"prisoners_dilemma": {"replications": 5}})
    jobs, out = snakemake(built)
    assert not any(k.startswith("run_echo_chamber") for k in jobs), jobs
    assert "figures_echo_chamber" not in jobs
    logs = _run_logs(built, "prisoners_dilemma")
    assert logs, out[-2000:]
    for condition, counts in logs.items():
        assert counts["replications"] == "5", condition
        assert counts["computed"] == "2", condition
        assert counts["fromStore"] == "3", condition
    conditions = json.loads(
        (built / "results" / "prisoners_dilemma" / "conditions.json").read_text()
    )
    assert all(c["replications"] == 5 for c in conditions)
    # and back to 3: every run is in the store
    _set_config(built, overrides={})
    snakemake(built)
    assert all(c["computed"] == "0" for c in _run_logs(built, "prisoners_dilemma").values())


def test_world_code_change_outdates_its_runs_only(built: Path) -> None:
    module = built / "simreport" / "kernel" / "worlds" / "prisoners_dilemma.py"
    original = module.read_text()
    # A code change: a comment alone would change nothing (see test_invalidation).
    module.write_text(original + "\n_A_CHANGE_TO_THE_WORLDS_CODE = 1\n")
    try:
        jobs, out = snakemake(built, "--dry-run")
        pd_runs = [k for k in jobs if k.startswith("run_prisoners_dilemma_")]
        conditions = json.loads(
            (built / "results" / "prisoners_dilemma" / "conditions.json").read_text()
        )
        assert len(pd_runs) == len(conditions), out[-2000:]
        assert not any(k.startswith("run_echo_chamber") for k in jobs)
    finally:
        module.write_text(original)


def test_workflow_and_cli_give_the_same_audit(built: Path, tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            str(BIN / "simreport"),
            "audit",
            "examples/prisoners_dilemma/audit.yaml",
            "--replications",
            "3",
            "--out",
            str(tmp_path / "cli"),
        ],
        cwd=built,
        env=_env(built),
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    workflow_audit = (built / "results" / "prisoners_dilemma" / "audit.json").read_bytes()
    assert (tmp_path / "cli" / "audit.json").read_bytes() == workflow_audit


def test_lint_and_format() -> None:
    proc = subprocess.run(
        [str(SNAKEMAKE), "--lint"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    snakefmt = BIN / "snakefmt"
    if not snakefmt.exists():
        pytest.skip("snakefmt not installed")
    files = ["Snakefile", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "rules").glob("*.smk"))]
    proc = subprocess.run(
        [str(snakefmt), "--check", *files], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_bad_plan_stops_before_any_job(tmp_path: Path) -> None:
    dest = _copy(tmp_path)
    plan_file = dest / "examples" / "echo_chamber" / "audit.yaml"
    plan_file.write_text(plan_file.read_text().replace("levels: [0.3, 0.95]", "levels: [0.3, 7]"))
    _, out = snakemake(dest, check=False)
    assert "axes.0.levels.1" in out and "audit.yaml" in out
    assert not (dest / "results").exists()


def test_cluster_executor_runs_jobs_as_separate_processes(tmp_path: Path) -> None:
    pytest.importorskip("snakemake_executor_plugin_cluster_generic")
    (tmp_path / "copy").mkdir()
    dest = _copy(tmp_path / "copy")
    # Four conditions: every job is a Snakemake process of its own, a few seconds each.
    plan_file = dest / "examples" / "prisoners_dilemma" / "memory.yaml"
    plan = {
        "id": "memory",
        "baseScenario": "scenario.yaml",
        "replications": 2,
        "concurrency": 2,
        "axes": [{"template": "memory_temporality", "levels": [1, 5, 10]}],
    }
    plan_file.write_text(yaml.safe_dump(plan, sort_keys=False))
    config = {"plans": [str(plan_file.relative_to(dest))]}
    (dest / "config" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    tests = Path(__file__).resolve().parents[1] / "cluster"
    env_state = tmp_path / "cluster-state"
    proc = subprocess.run(
        [
            str(SNAKEMAKE),
            "--executor",
            "cluster-generic",
            "--jobs",
            "4",
            "--workflow-profile",
            "none",
            "--cluster-generic-submit-cmd",
            f"{sys.executable} {tests / 'submit.py'}",
            "--cluster-generic-status-cmd",
            f"{sys.executable} {tests / 'status.py'}",
            "--seconds-between-status-checks",
            "1",
            "--latency-wait",
            "5",
        ],
        cwd=dest,
        env={**_env(dest), "SIMREPORT_TEST_CLUSTER_STATE": str(env_state)},
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert (dest / "site" / "index.html").exists()
    processes = {counts["process"] for counts in _run_logs(dest, "memory").values()}
    conditions = json.loads((dest / "results" / "memory" / "conditions.json").read_text())
    assert len(conditions) == 4
    assert len(processes) == len(conditions), "each condition job ran in its own process"
    assert str(os.getpid()) not in processes
