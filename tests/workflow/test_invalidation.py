"""What reruns after an edit (SPEC §12): code fingerprints over normalised sources for runs,
analysis and pages; per-condition asset inputs; obsolete run folders; readable rule names."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from simreport.core.fingerprint import (
    PACKAGE_ROOT,
    code_fingerprint,
    normalised_source,
    package_files,
)
from simreport.harness import build_conditions, load_plan, plan_jobs
from simreport.kernel import input_hashes, load_scenario, run_scenario
from simreport.kernel.testbed.assets import resolved_asset_files
from simreport.workflow import ConditionTarget, load_workflow, remove_obsolete_runs
from simreport.workflow.outputs import ANALYSIS_CODE, REPORT_CODE
from tests.e2e.test_workflow import ROOT, SNAKEMAKE, _copy, snakemake

EXAMPLES = ROOT / "examples"
PROMPT_2 = Path("assets") / "refund-prompt" / "2.0.0.yaml"
"""An asset only the `prompt_wording=refund-prompt@2.0.0` condition resolves."""
PROMPT_2_CONDITION = "prompt_wording=refund-prompt@2.0.0"


# --------------------------------------------------------------------------- fingerprints

CODE = '''\
"""A module."""

LIMIT = 3
"""How many."""


def twice(x: int) -> int:
    """Double it."""
    return 2 * x  # the simple way
'''


def _fingerprint(tmp_path: Path, source: str) -> str:
    path = tmp_path / "module.py"
    path.write_text(source)
    return code_fingerprint([path], root=tmp_path)


def test_comments_docstrings_and_layout_change_no_fingerprint(tmp_path: Path) -> None:
    before = _fingerprint(tmp_path, CODE)
    edited = (
        CODE.replace('"""A module."""', '"""A module that doubles."""\n# a new comment\n')
        .replace('"""How many."""', '"""How many, at most."""')
        .replace('"""Double it."""', "")
        .replace("  # the simple way", "\n\n")
    )
    assert _fingerprint(tmp_path, edited) == before


def test_a_code_change_changes_the_fingerprint(tmp_path: Path) -> None:
    before = _fingerprint(tmp_path, CODE)
    assert _fingerprint(tmp_path, CODE.replace("2 * x", "x + x")) != before
    assert _fingerprint(tmp_path, CODE.replace("LIMIT = 3", "LIMIT = 4")) != before


def test_templates_count_by_their_bytes(tmp_path: Path) -> None:
    template = tmp_path / "page.html.j2"
    template.write_text("<p>{{ x }}</p>\n")
    before = code_fingerprint([template], root=tmp_path)
    template.write_text("<p>{{ x }}</p>\n{# a comment #}\n")
    assert code_fingerprint([template], root=tmp_path) != before
    assert normalised_source(template) == template.read_bytes()


def test_a_file_that_does_not_parse_still_has_a_fingerprint(tmp_path: Path) -> None:
    assert _fingerprint(tmp_path, "def broken(:\n") != _fingerprint(tmp_path, "def broken(:\n\n")


def test_the_analysis_and_report_fingerprints_cover_their_whole_folders() -> None:
    """Every module of the analysis, the report and core, subpackages included, and every
    template: a module split into a package keeps its code in the fingerprint."""
    analysis = set(package_files(*ANALYSIS_CODE))
    report = set(package_files(*REPORT_CODE))
    for folder, covered in (("analysis", analysis), ("report", report)):
        for layer in (folder, "core"):
            modules = set((PACKAGE_ROOT / layer).rglob("*.py"))
            assert modules and modules <= covered, sorted(map(str, modules - covered))
    templates = {
        path for path in (PACKAGE_ROOT / "report" / "templates").rglob("*") if path.is_file()
    }
    assert templates and templates <= report


# --------------------------------------------------------------------------- asset inputs


def _refund_copy(tmp_path: Path) -> Path:
    dest = tmp_path / "refund_desk"
    shutil.copytree(EXAMPLES / "refund_desk", dest)
    return dest


def _conditions_inputs(plan_dir: Path) -> dict[str, dict[str, str]]:
    loaded = load_plan(plan_dir / "audit.yaml")
    return {c.id: input_hashes(c.scenario, loaded.asset_root) for c in build_conditions(loaded)}


def test_a_condition_hashes_only_the_asset_versions_it_resolves(tmp_path: Path) -> None:
    inputs = _conditions_inputs(_refund_copy(tmp_path))
    users = {cid for cid, files in inputs.items() if PROMPT_2.as_posix() in files}
    assert users == {PROMPT_2_CONDITION}
    # Labels resolve: the base scenario's `refund-prompt@stable` is version 1.0.0.
    assert "assets/refund-prompt/1.0.0.yaml" in inputs["base"]
    assert not any(name.endswith("labels.yaml") for name in inputs["base"])
    # The rubric is referenced by version; an unreferenced version is never hashed.
    assert all("refund-prompt/1.1.0" not in name for name in inputs["base"])


def test_the_resolved_files_are_those_a_run_records(tmp_path: Path) -> None:
    """The key's asset list and the world's manifest agree, slot by slot."""
    loaded = load_scenario(EXAMPLES / "refund_desk" / "scenario.yaml")
    run_scenario(loaded.scenario, tmp_path / "run", asset_root=loaded.asset_root)
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    library = loaded.asset_root / "assets"
    files = resolved_asset_files(loaded.scenario, library)
    assert {slot: path.relative_to(library).as_posix() for slot, path in files.items() if path} == {
        slot: record["file"] for slot, record in manifest["resolved"].items()
    }


def test_an_unresolvable_reference_is_part_of_the_key(tmp_path: Path) -> None:
    plan_dir = _refund_copy(tmp_path)
    loaded = load_plan(plan_dir / "audit.yaml")
    base = build_conditions(loaded)[0].scenario
    missing = base.model_copy(
        update={"sut": base.sut.model_copy(update={"prompt": "refund-prompt@9.9.9"})}
    )
    assert input_hashes(missing, loaded.asset_root)["sut.prompt"] == "unresolved"


def _store_keys(plan_dir: Path, tmp_path: Path) -> dict[tuple[str, int], str]:
    loaded = load_plan(plan_dir / "audit.yaml", replications=2)
    _, jobs, _ = plan_jobs(loaded, build_conditions(loaded), tmp_path / "out")
    return {(job.condition, job.replication): job.key for job in jobs}


def test_editing_one_asset_changes_only_its_conditions_store_keys(tmp_path: Path) -> None:
    plan_dir = _refund_copy(tmp_path)
    before = _store_keys(plan_dir, tmp_path)
    asset = plan_dir / PROMPT_2
    asset.write_text(asset.read_text().replace("style: fast", "style: very fast"))
    after = _store_keys(plan_dir, tmp_path)
    changed = {slot for slot in before if before[slot] != after[slot]}
    assert changed == {(PROMPT_2_CONDITION, 0), (PROMPT_2_CONDITION, 1)}


def test_workflow_keys_follow_the_same_inputs(tmp_path: Path) -> None:
    plan_dir = _refund_copy(tmp_path)
    config = {"plans": [str(plan_dir / "audit.yaml")], "replications": 2}

    def keys() -> dict[str, str]:
        plan = load_workflow(config, tmp_path).plans[0]
        return {t.condition.id: t.key for t in plan.conditions}

    before = keys()
    (plan_dir / "assets" / "refund-prompt" / "1.1.0.yaml").write_text(
        (plan_dir / "assets" / "refund-prompt" / "1.1.0.yaml").read_text() + "# reviewed\n"
    )
    after = keys()
    assert {cid for cid in before if before[cid] != after[cid]} == {
        "prompt_wording=refund-prompt@1.1.0"
    }


# --------------------------------------------------------------------------- rule names


_BASE = build_conditions(load_plan(EXAMPLES / "prisoners_dilemma" / "audit.yaml"))[0]


def _target(plan: str, condition_id: str, *, shared: bool = False) -> ConditionTarget:
    return ConditionTarget(plan, replace(_BASE, id=condition_id), [], "", "", slug_shared=shared)


def test_rule_names_are_readable_identifiers() -> None:
    name = _target("prisoners_dilemma", "linguistic_framing=moralised").rule_name
    assert name == "run_prisoners_dilemma_linguistic_framing_moralised"
    assert _target("refund-desk", "prompt=p@2.0.0|model=m").rule_name == (
        "run_refund_desk_prompt_p_2_0_0_model_m"
    )
    long = _target("echo_chamber", 'design={"dose":0.25,"message":"balanced",' + "x" * 80 + "}")
    assert long.rule_name.isidentifier() and len(long.rule_name) <= 72
    shared = _target("p", "a=b", shared=True).rule_name
    assert shared.startswith("run_p_a_b_") and shared != _target("p", "a=b").rule_name
    for odd in ("=", "é=ü", "1=2"):
        assert _target("p", odd).rule_name.isidentifier()


def test_rule_names_stay_when_other_conditions_come_and_go(tmp_path: Path) -> None:
    plan_file = tmp_path / "prisoners_dilemma" / "audit.yaml"
    shutil.copytree(EXAMPLES / "prisoners_dilemma", plan_file.parent)

    def names() -> dict[str, str]:
        plan = load_workflow({"plans": [str(plan_file)]}, tmp_path).plans[0]
        return {t.condition.id: t.rule_name for t in plan.conditions}

    before = names()
    assert before["linguistic_framing=moralised"] == (
        "run_prisoners_dilemma_linguistic_framing_moralised"
    )
    assert len(set(before.values())) == len(before)
    text = plan_file.read_text()
    plan_file.write_text(text.replace("levels: [moralised, risk]", "levels: [moralised, neutral]"))
    after = names()
    assert {cid: after[cid] for cid in before.keys() & after.keys()} == {
        cid: before[cid] for cid in before.keys() & after.keys()
    }
    assert after["linguistic_framing=neutral"] == "run_prisoners_dilemma_linguistic_framing_neutral"


def test_colliding_slugs_get_a_hash(tmp_path: Path) -> None:
    plan_file = tmp_path / "prisoners_dilemma" / "audit.yaml"
    shutil.copytree(EXAMPLES / "prisoners_dilemma", plan_file.parent)
    # Two model names that differ only in punctuation: every slug is shared by two conditions.
    plan_file.write_text(plan_file.read_text() + "models: [offline-a.b, offline-a-b]\n")
    plan = load_workflow({"plans": [str(plan_file)]}, tmp_path).plans[0]
    names = [t.rule_name for t in plan.conditions]
    assert len(set(names)) == len(names)
    assert all(n.isidentifier() and n.startswith("run_prisoners_dilemma_") for n in names)
    assert all(t.slug_shared for t in plan.conditions)


# --------------------------------------------------------------------------- obsolete folders


def test_obsolete_folders_go_and_nothing_else(tmp_path: Path) -> None:
    plan_file = tmp_path / "prisoners_dilemma" / "audit.yaml"
    shutil.copytree(EXAMPLES / "prisoners_dilemma", plan_file.parent)
    config = {"plans": [str(plan_file)], "replications": 2, "results": str(tmp_path / "results")}
    plan = load_workflow(config, tmp_path).plans[0]
    runs = plan.out_dir / "runs"
    current = [t.condition.dir for t in plan.conditions]
    for name in [*current, "gone=level"]:
        for rep in ("0", "1", "2", "10"):
            (runs / name / rep).mkdir(parents=True)
            (runs / name / rep / "result.json").write_text("{}")
    (runs / current[0] / "notes").mkdir()
    (runs / "README.txt").write_text("kept")
    outside = tmp_path / "outside"
    outside.mkdir()
    (runs / "linked").symlink_to(outside, target_is_directory=True)
    (plan.out_dir / "logs").mkdir()

    removed = remove_obsolete_runs(plan)

    assert runs / "gone=level" in removed and not (runs / "gone=level").exists()
    for name in current:
        assert sorted(p.name for p in (runs / name).iterdir() if p.name != "notes") == ["0", "1"]
    assert (runs / current[0] / "notes").is_dir()
    assert (runs / "README.txt").exists() and (runs / "linked").is_symlink() and outside.is_dir()
    assert (plan.out_dir / "logs").is_dir()
    assert remove_obsolete_runs(plan) == []


# --------------------------------------------------------------------------- end to end

needs_snakemake = pytest.mark.skipif(
    not SNAKEMAKE.exists(), reason="snakemake is not installed next to python"
)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = _copy(tmp_path_factory.mktemp("invalidation"))
    path = dest / "config" / "config.yaml"
    config = yaml.safe_load(path.read_text())
    config["plans"] = ["examples/prisoners_dilemma/audit.yaml", "examples/refund_desk/audit.yaml"]
    config["replications"] = 2
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    jobs, out = snakemake(dest)
    assert jobs["site"] == 1, out[-3000:]
    return dest


class _Edited:
    """Edit a file of the copy for the duration of a `with` block."""

    def __init__(self, path: Path, edit: str, *, old: str | None = None) -> None:
        self.path, self.edit, self.old = path, edit, old

    def __enter__(self) -> None:
        self.original = self.path.read_text()
        if self.old is None:
            self.path.write_text(self.original + self.edit)
        else:
            assert self.old in self.original, self.old
            self.path.write_text(self.original.replace(self.old, self.edit, 1))

    def __exit__(self, *exc: object) -> None:
        self.path.write_text(self.original)


def _dry(dest: Path) -> tuple[dict[str, int], str]:
    return snakemake(dest, "--dry-run")


AFTER_ANALYSIS = {
    "analyse": 2,
    "figures_prisoners_dilemma": 1,
    "figures_refund_desk": 1,
    "report": 2,
    "methods": 2,
    "site": 1,
    "all": 1,
}
AFTER_REPORT = {k: v for k, v in AFTER_ANALYSIS.items() if k != "analyse"}


@pytest.mark.slow
@needs_snakemake
def test_analysis_code_reruns_the_analysis_and_after_never_runs(built: Path) -> None:
    code = "\n\ndef _spare_statistic(values: list[float]) -> float:\n    return max(values)\n"
    with _Edited(built / "simreport" / "analysis" / "stats.py", code):
        jobs, out = _dry(built)
    assert jobs == AFTER_ANALYSIS, out[-2000:]


@pytest.mark.slow
@needs_snakemake
def test_report_code_reruns_figures_pages_and_site_only(built: Path) -> None:
    code = "\n\ndef _spare_heading(text: str) -> str:\n    return text.title()\n"
    with _Edited(built / "simreport" / "report" / "html.py", code):
        jobs, out = _dry(built)
    assert jobs == AFTER_REPORT, out[-2000:]
    template = built / "simreport" / "report" / "templates" / "report.html.j2"
    with _Edited(template, "\n"):
        jobs, out = _dry(built)
    assert jobs == AFTER_REPORT, out[-2000:]


@pytest.mark.slow
@needs_snakemake
def test_comments_and_docstrings_rerun_nothing(built: Path) -> None:
    world = built / "simreport" / "kernel" / "worlds" / "prisoners_dilemma.py"
    stats = built / "simreport" / "analysis" / "stats.py"
    html = built / "simreport" / "report" / "html.py"
    first_doc = html.read_text().split('"""', 2)[1]
    with (
        _Edited(world, "\n# a comment about the world\n"),
        _Edited(world, '"""The iterated game, told differently.', old='"""'),
        _Edited(stats, "\n# why the statistics are computed so\n"),
        _Edited(html, first_doc + " Also a longer docstring.", old=first_doc),
    ):
        jobs, out = _dry(built)
    assert jobs == {} and "Nothing to be done" in out, out[-2000:]


@pytest.mark.slow
@needs_snakemake
def test_one_asset_reruns_only_the_conditions_that_resolve_it(built: Path) -> None:
    asset = built / "examples" / "refund_desk" / PROMPT_2
    with _Edited(asset, "style: very fast", old="style: fast"):
        jobs, out = _dry(built)
    runs = {k: v for k, v in jobs.items() if k.startswith("run_")}
    assert runs == {"run_refund_desk_prompt_wording_refund_prompt_2_0_0": 1}, out[-2000:]
    assert jobs["analyse"] == 1 and "figures_prisoners_dilemma" not in jobs


def _run_dirs(dest: Path, plan: str) -> dict[str, list[str]]:
    runs = dest / "results" / plan / "runs"
    return {c.name: sorted(r.name for r in c.iterdir()) for c in sorted(runs.iterdir())}


def _set_pd_replications(dest: Path, replications: int | None) -> None:
    path = dest / "config" / "config.yaml"
    config = yaml.safe_load(path.read_text())
    config["overrides"] = (
        {"prisoners_dilemma": {"replications": replications}} if (replications) else {}
    )
    path.write_text(yaml.safe_dump(config, sort_keys=False))


@pytest.mark.slow
@needs_snakemake
def test_obsolete_condition_and_replication_folders_are_removed(built: Path) -> None:
    plan_file = built / "examples" / "prisoners_dilemma" / "audit.yaml"
    gone = "linguistic_framing=risk"
    assert gone in _run_dirs(built, "prisoners_dilemma")
    with _Edited(plan_file, "levels: [moralised]", old="levels: [moralised, risk]"):
        jobs, out = snakemake(built)
        assert not any(k.startswith("run_") for k in jobs), out[-2000:]
        dirs = _run_dirs(built, "prisoners_dilemma")
        assert gone not in dirs and "base" in dirs, dirs
        assert (built / "results" / "prisoners_dilemma" / "plan.json").exists()
    # The level is back: its runs come from the store.
    snakemake(built)
    assert _run_dirs(built, "prisoners_dilemma")[gone] == ["0", "1"]

    _set_pd_replications(built, 1)
    snakemake(built)
    assert set(map(tuple, _run_dirs(built, "prisoners_dilemma").values())) == {("0",)}
    assert _run_dirs(built, "refund_desk")["base"] == ["0", "1"]
    _set_pd_replications(built, None)
    snakemake(built)
    assert set(map(tuple, _run_dirs(built, "prisoners_dilemma").values())) == {("0", "1")}
    logs = built / "results" / "prisoners_dilemma" / "logs" / "runs"
    for log in logs.glob("*.log"):
        if log.stem in _run_dirs(built, "prisoners_dilemma"):
            summary = log.read_text().strip().splitlines()[-1]
            assert "computed=0" in summary and "fromStore=2" in summary, summary


PD_SCENARIO = Path("examples") / "prisoners_dilemma" / "scenario.yaml"
PAGES_ONLY = {
    "plan_spec": 1,
    "analyse": 1,
    "figures_prisoners_dilemma": 1,
    "report": 1,
    "methods": 1,
    "site": 1,
    "all": 1,
}
"""What an edit no run reads reruns: the plan's spec, its analysis (audit.json carries the plan
it reports), its pages and the site."""


def _run_record(dest: Path, plan: str) -> dict[str, tuple[bytes, int]]:
    """Every run file and condition log of a plan, with its bytes and modification time: a run
    that executes again, or a condition job that runs again, changes both."""
    out = dest / "results" / plan
    files = [*sorted((out / "runs").rglob("*.json")), *sorted((out / "logs" / "runs").glob("*"))]
    return {str(path): (path.read_bytes(), path.stat().st_mtime_ns) for path in files}


def _store_entries(dest: Path) -> list[str]:
    return sorted(entry.name for entry in (dest / "results" / ".store").glob("*/*"))


@pytest.mark.slow
@needs_snakemake
def test_a_description_edit_reruns_no_run_and_the_pages_show_it(built: Path) -> None:
    snakemake(built)  # whatever earlier tests left, up to date first
    runs, entries = _run_record(built, "prisoners_dilemma"), _store_entries(built)
    audit_file = built / "results" / "prisoners_dilemma" / "audit.json"
    before = json.loads(audit_file.read_text())
    scenario = built / PD_SCENARIO
    with (
        _Edited(scenario, "in pairs that never change", old="in fixed pairs"),
        _Edited(scenario, "name: Prisoners, renamed", old="name: Iterated prisoner's dilemma"),
    ):
        jobs, out = _dry(built)
        assert jobs == PAGES_ONLY, out[-2000:]
        jobs, out = snakemake(built)
        assert not any(rule.startswith("run_") for rule in jobs), out[-2000:]
        # No run executed: every run file and condition log as it was, the store as it was.
        assert _run_record(built, "prisoners_dilemma") == runs
        assert _store_entries(built) == entries
        report = (built / "results" / "prisoners_dilemma" / "report.html").read_text()
        assert "Prisoners, renamed" in report
        site_audit = json.loads((built / "site" / "prisoners_dilemma" / "audit.json").read_text())
        assert "in pairs that never change" in site_audit["plan"]["base"]["description"]
        after = json.loads(audit_file.read_text())
        assert after["plan"]["hash"] == before["plan"]["hash"]
        assert after["tests"] == before["tests"]
    jobs, out = snakemake(built)
    assert jobs == PAGES_ONLY, out[-2000:]


def test_a_python_agent_s_code_is_an_input_of_its_runs(tmp_path: Path) -> None:
    """An agent under test reached as a Python entry: editing its module makes every run of it
    out of date; another file of the folder changes nothing."""
    plan_dir = tmp_path / "airline_desk"
    shutil.copytree(EXAMPLES / "airline_desk", plan_dir)
    inputs = _conditions_inputs(plan_dir)
    assert all("rebooking_agent.py" in files for files in inputs.values())
    before = _store_keys(plan_dir, tmp_path)
    (plan_dir / "notes.py").write_text("# not imported by any run\n")
    assert _store_keys(plan_dir, tmp_path) == before
    agent = plan_dir / "rebooking_agent.py"
    agent.write_text(agent.read_text().replace("Have a good trip!", "Safe travels!"))
    after = _store_keys(plan_dir, tmp_path)
    assert before.keys() == after.keys()
    assert all(before[key] != after[key] for key in before)


def test_an_agent_package_counts_with_every_module_in_it(tmp_path: Path) -> None:
    from simreport.kernel.testbed.agents import entry_files

    package = tmp_path / "desk_agent"
    (package / "__pycache__").mkdir(parents=True)
    for name in ("__init__.py", "policy.py", "__pycache__/policy.cpython-311.pyc"):
        (package / name).write_text("")
    assert entry_files("desk_agent.policy:respond", tmp_path) == [
        package / "__init__.py",
        package / "policy.py",
    ]
    assert entry_files("json:loads", tmp_path) == []  # imported from the environment
