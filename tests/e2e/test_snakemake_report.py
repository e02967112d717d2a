"""`snakemake --report report.zip`: Snakemake's own report holds every audit's report.html,
figures, methods and audit.json, each under its plan's category with its caption."""

from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.e2e.test_workflow import ROOT, SNAKEMAKE, _copy, _env

PLANS = ("prisoners_dilemma", "echo_chamber")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not SNAKEMAKE.exists(), reason="snakemake is not installed next to python"),
]


def _snakemake(dest: Path, *args: str) -> None:
    proc = subprocess.run(
        [str(SNAKEMAKE), *args],
        cwd=dest,
        env=_env(dest),
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]


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


def test_snakemake_report_holds_every_audit_with_captions(tmp_path: Path) -> None:
    dest = _copy(tmp_path)
    config = yaml.safe_load((dest / "config" / "config.yaml").read_text())
    config["plans"] = [f"examples/{plan}/audit.yaml" for plan in PLANS]
    config["replications"] = 2
    (dest / "config" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    _snakemake(dest, "--cores", "2")
    _snakemake(dest, "--report", "report.zip")

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
    assert set(categories) == set(PLANS)
    for plan in PLANS:
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
