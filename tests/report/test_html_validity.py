"""Every page the site shows is valid HTML by the W3C Nu checker (vnu.jar), when it is available.

CI installs it (`npm install vnu-jar`, run by .ci/run); elsewhere set SIMREPORT_VNU_JAR to a
vnu.jar, or the test is skipped.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CANDIDATES = [
    os.environ.get("SIMREPORT_VNU_JAR", ""),
    str(ROOT / ".ci" / "vnu" / "node_modules" / "vnu-jar" / "build" / "dist" / "vnu.jar"),
]
VNU = next((c for c in CANDIDATES if c and Path(c).is_file()), None)

needs_vnu = pytest.mark.requires(
    VNU is not None and shutil.which("java") is not None, "java and the Nu checker (vnu.jar)"
)
pytestmark = [pytest.mark.slow, needs_vnu]


def _edited(audit_dir: Path, out: Path) -> Path:
    """A copy of the audit with what a plain run may lack: long labels, a comparison with |d|
    from near-zero spread, an unranked axis, hostile text, a power analysis with notes."""
    from simreport.core.files import write_json
    from simreport.report import write_methods, write_report

    shutil.copytree(audit_dir, out, ignore=shutil.ignore_patterns("runs"))
    audit = json.loads((out / "audit.json").read_text(encoding="utf-8"))
    audit["plan"]["id"] = "edited"
    audit["plan"]["title"] = '<b>Edited</b> & "quoted"'
    for i, cond in enumerate(audit["conditions"]):
        cond["label"] = f"A long shared prefix for every level <{i}> of the audit, then the end"
    metric = audit["metrics"][0]
    tested = [r for r in audit["tests"][metric] if r.get("tested")]
    tested[0]["smallSpread"] = True
    audit["sensitivity"].append(
        {"axis": "<never>", "code": None, "rank": None, "rankedBy": None, "isolated": None,
         "anyCell": None}
    )  # fmt: skip
    # The audit's own power analysis and noise floor, with hostile text and notes in them.
    audit["power"]["method"] = "a <method>"
    audit["power"]["metrics"][metric][0].update(mde=None, note="too few <values>")
    audit["noiseFloor"][metric][0].update(flipRate=None, note="too <few>")
    write_json(out / "audit.json", audit)
    write_report(out)
    write_methods(out)
    return out


def test_report_methods_and_index_are_valid_html(tmp_path: Path) -> None:
    import simreport
    from simreport.api import site

    plan = ROOT / "examples" / "prisoners_dilemma" / "audit.yaml"
    audit_dir = tmp_path / "results" / "prisoners_dilemma"
    simreport.audit(plan, out=audit_dir, replications=2)
    edited = _edited(audit_dir, tmp_path / "results" / "edited")
    site([audit_dir, edited], tmp_path / "site")
    pages = [
        tmp_path / "site" / "index.html",
        tmp_path / "site" / "prisoners_dilemma" / "report.html",
        tmp_path / "site" / "prisoners_dilemma" / "methods.html",
        tmp_path / "site" / "edited" / "report.html",
        tmp_path / "site" / "edited" / "methods.html",
    ]
    _assert_valid(pages)


def test_factorial_report_is_valid_html(tmp_path: Path) -> None:
    """A full factorial's report (main effects, interactions and their figures), with hostile
    text in an axis label and a level label."""
    import simreport
    from simreport.core.files import write_json
    from simreport.report import write_methods, write_report

    plan = ROOT / "examples" / "echo_chamber" / "factorial-audit.yaml"
    audit_dir = tmp_path / "results" / "echo_chamber_factorial"
    simreport.audit(plan, out=audit_dir, replications=2, ledger=False)
    audit = json.loads((audit_dir / "audit.json").read_text(encoding="utf-8"))
    axis = audit["plan"]["axes"][1]
    axis["label"] = '<i>feed</i> & "ranking"'
    axis["labels"] = {"random": "<script>random</script>"}
    write_json(audit_dir / "audit.json", audit)
    write_report(audit_dir)
    write_methods(audit_dir)
    report = audit_dir / "report.html"
    assert "<script>" not in report.read_text(encoding="utf-8")
    _assert_valid([report, audit_dir / "methods.html"])


def _assert_valid(pages: list[Path]) -> None:
    proc = subprocess.run(
        ["java", "-jar", str(VNU), "--format", "json", "--errors-only", *map(str, pages)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    messages = json.loads(proc.stderr or '{"messages": []}')["messages"]
    assert messages == [], json.dumps(messages, indent=1)[:3000]
