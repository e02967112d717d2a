"""The documentation site builds strictly (every internal link and anchor checked), its reference
names every command, and the README stays short and links only to pages that exist."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from simreport.cli.main import build_parser
from simreport.cli.reference import commands

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_README_LINES = 250

HAS_MKDOCS = all(
    importlib.util.find_spec(name) is not None for name in ("mkdocs", "material", "mkdocstrings")
)
needs_mkdocs = pytest.mark.requires(HAS_MKDOCS, "mkdocs with its theme and plugins (.[docs])")

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _mkdocs(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "NO_MKDOCS_2_WARNING": "1",
    }
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        cwd=config.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The documentation site, built strictly from the repository into a temporary folder."""
    if not HAS_MKDOCS:
        pytest.skip("mkdocs is not installed")  # the marked tests report it (fail under CI)
    out = tmp_path_factory.mktemp("docs") / "site"
    built = _mkdocs(ROOT / "mkdocs.yml", out)
    assert built.returncode == 0, built.stderr
    return out


@needs_mkdocs
def test_the_site_builds_strictly_with_every_page_of_the_nav(site: Path) -> None:
    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=yaml.BaseLoader)
    assert config["site_dir"] != "site", "the audits' static site is written to site/"

    def pages(nav: object) -> list[str]:
        if isinstance(nav, str):
            return [nav]
        if isinstance(nav, dict):
            return [p for value in nav.values() for p in pages(value)]
        if isinstance(nav, list):
            return [p for item in nav for p in pages(item)]
        return []

    listed = pages(config["nav"])
    assert "tutorial.md" in listed
    for page in listed:
        built = site / ("" if page == "index.md" else page.removesuffix(".md")) / "index.html"
        assert built.is_file(), page


@needs_mkdocs
def test_every_command_has_a_section_in_the_built_reference(site: Path) -> None:
    html = (site / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    ids = set(re.findall(r'<h[1-4] id="([^"]+)"', html))
    progs = [sub.prog for sub, _ in commands(build_parser())]
    assert len(progs) > 20
    missing = [prog for prog in progs if prog.replace(" ", "-") not in ids]
    assert missing == []


@needs_mkdocs
def test_the_schemas_and_the_api_are_in_the_built_reference(site: Path) -> None:
    plan = (site / "reference" / "plan" / "index.html").read_text(encoding="utf-8")
    assert "<code>replications</code>" in plan
    assert 'id="perturbationaxis"' in plan
    audit = (site / "reference" / "audit" / "index.html").read_text(encoding="utf-8")
    assert "<code>verdict</code>" in audit
    api = (site / "reference" / "python-api" / "index.html").read_text(encoding="utf-8")
    for name in ("audit", "validate", "power"):
        assert f'id="simreport.api.{name}"' in api


@needs_mkdocs
def test_a_broken_anchor_fails_the_strict_build(tmp_path: Path) -> None:
    """The site's own link checks, on two pages: one links to an anchor the other lacks."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\nSee [other](other.md#missing).\n", encoding="utf-8")
    (docs / "other.md").write_text("# Other\n\n## Present\n", encoding="utf-8")
    small = {
        "site_name": "check",
        "docs_dir": "docs",
        "strict": True,
        "validation": config["validation"],
        "markdown_extensions": config["markdown_extensions"],
    }
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(small), encoding="utf-8")
    failed = _mkdocs(tmp_path / "mkdocs.yml", tmp_path / "out")
    assert failed.returncode != 0
    assert "'#missing'" in failed.stderr

    (docs / "index.md").write_text("# Home\n\nSee [other](other.md#present).\n", encoding="utf-8")
    assert _mkdocs(tmp_path / "mkdocs.yml", tmp_path / "out").returncode == 0


def test_the_readme_is_short() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES


def test_the_readme_links_only_to_docs_pages_that_exist() -> None:
    links = LINK.findall(README.read_text(encoding="utf-8"))
    assert links
    wrong = []
    for link in links:
        if link.startswith(("http://", "https://")):
            continue
        target = link.split("#", 1)[0]
        path = (ROOT / target).resolve()
        if not (target.startswith("docs/") and target.endswith(".md") and path.is_file()):
            wrong.append(link)
    assert wrong == []


def test_the_readme_example_plan_validates(tmp_path: Path) -> None:
    """The README's plan, written beside a copy of the example scenario as it says."""
    from simreport.api import validate

    text = README.read_text(encoding="utf-8")
    block = re.search(r"```yaml\n(.*?)```", text, re.S)
    assert block is not None
    shutil.copy(ROOT / "examples" / "prisoners_dilemma" / "scenario.yaml", tmp_path)
    (tmp_path / "audit.yaml").write_text(block.group(1), encoding="utf-8")
    result = validate(tmp_path / "audit.yaml")
    assert result.kind == "plan"
    assert (result.details["conditions"], result.details["runs"]) == (5, 50)
    assert "5 conditions (the base and one per level) × 10 replications" in text
