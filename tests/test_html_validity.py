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

ROOT = Path(__file__).resolve().parent.parent
CANDIDATES = [
    os.environ.get("SIMREPORT_VNU_JAR", ""),
    str(ROOT / ".ci" / "vnu" / "node_modules" / "vnu-jar" / "build" / "dist" / "vnu.jar"),
]
VNU = next((c for c in CANDIDATES if c and Path(c).is_file()), None)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.requires(
        VNU is not None and shutil.which("java") is not None, "java and the Nu checker (vnu.jar)"
    ),
]


def test_report_methods_and_index_are_valid_html(tmp_path: Path) -> None:
    import simreport
    from simreport.api import site

    plan = ROOT / "examples" / "prisoners_dilemma" / "audit.yaml"
    audit_dir = tmp_path / "results" / "prisoners_dilemma"
    simreport.audit(plan, out=audit_dir, replications=2)
    site([audit_dir], tmp_path / "site")
    pages = [
        tmp_path / "site" / "index.html",
        tmp_path / "site" / "prisoners_dilemma" / "report.html",
        tmp_path / "site" / "prisoners_dilemma" / "methods.html",
    ]
    proc = subprocess.run(
        ["java", "-jar", str(VNU), "--format", "json", "--errors-only", *map(str, pages)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    messages = json.loads(proc.stderr or '{"messages": []}')["messages"]
    assert messages == [], json.dumps(messages, indent=1)[:3000]
