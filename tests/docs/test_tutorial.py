"""The tutorial (docs/tutorial.md) runs as written.

Convention: an HTML comment on the line before a fenced block marks it (invisible on the page;
unmarked blocks are left alone). `<!-- runnable -->`: a shell block, run in order with bash in
one scratch copy of the workflow, the virtual environment's bin first on PATH; it must exit 0.
`<!-- output -->`: each line is a line of the previous runnable block's stdout.
`<!-- excerpt: PATH -->`: verbatim text of the file PATH as the steps before it left it.
Every file under studies/, results/ or site/ the page names in backticks must exist at the end.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import pytest
import yaml

from tests.support.workflow_copy import copy_workflow

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "docs" / "tutorial.md"
BIN = Path(sys.executable).parent
RUNNABLE = "<!-- runnable -->"
OUTPUT = "<!-- output -->"
_EXCERPT = re.compile(r"^<!-- excerpt: (\S+) -->$")
BLOCK_TIMEOUT = 600
_NAMED_FILE = re.compile(r"`((?:studies|results|site)/[^`<>\s]+\.\w+)`")


@dataclass(frozen=True)
class Block:
    kind: str  # "runnable", "output" or "excerpt"
    text: str
    line: int
    """The line of the tutorial where the block's code starts."""
    source: str | None = None
    """The file an excerpt is taken from."""


def marked_blocks(markdown: str) -> list[Block]:
    """The blocks the markers name, in order. A marker not followed by a fenced block, or a
    fence left open, is an error naming its line."""
    lines = markdown.splitlines()
    blocks = []
    for i, line in enumerate(lines):
        kind = {RUNNABLE: "runnable", OUTPUT: "output"}.get(line.strip())
        excerpt = _EXCERPT.match(line.strip())
        if excerpt is not None:
            kind = "excerpt"
        if kind is None:
            continue
        fence = lines[i + 1] if i + 1 < len(lines) else ""
        if not fence.startswith("```"):
            raise AssertionError(f"line {i + 1}: {line.strip()} is not followed by a fenced block")
        ticks = fence[: len(fence) - len(fence.lstrip("`"))]
        end = next((j for j in range(i + 2, len(lines)) if lines[j].strip() == ticks), None)
        if end is None:
            raise AssertionError(f"line {i + 2}: the fenced block is never closed")
        source = excerpt.group(1) if excerpt is not None else None
        blocks.append(Block(kind, "\n".join(lines[i + 2 : end]) + "\n", i + 3, source))
    return blocks


def named_files(markdown: str) -> list[str]:
    """The files under studies/, results/ or site/ the text names in backticks (`*` a glob)."""
    return sorted(set(_NAMED_FILE.findall(markdown)))


# --------------------------------------------------------------------------- the convention


def test_markers_name_the_block_after_them_and_nothing_else() -> None:
    sample = (
        "```sh\necho not marked\n```\n"
        f"{RUNNABLE}\n```sh\necho one\necho two\n```\n"
        f"{OUTPUT}\n```text\none\n```\n"
        f"{RUNNABLE}\n````sh\ncat <<'EOF'\n```\nEOF\n````\n"
        "<!-- excerpt: results/x/a.yaml -->\n```yaml\nkey: 1\n```\n"
        "See `results/x/audit.json` and `site/<id>/report.html`, not `src/a.py`.\n"
    )
    assert marked_blocks(sample) == [
        Block("runnable", "echo one\necho two\n", 6),
        Block("output", "one\n", 11),
        Block("runnable", "cat <<'EOF'\n```\nEOF\n", 15),
        Block("excerpt", "key: 1\n", 21, "results/x/a.yaml"),
    ]
    assert named_files(sample) == ["results/x/audit.json"]


@pytest.mark.parametrize(
    "text", [f"{RUNNABLE}\nsome prose\n", f"{OUTPUT}\n```text\nnever closed\n"]
)
def test_a_marker_without_a_whole_block_is_an_error(text: str) -> None:
    with pytest.raises(AssertionError, match=r"line \d+"):
        marked_blocks(text)


def test_the_tutorial_marks_its_steps() -> None:
    markdown = TUTORIAL.read_text(encoding="utf-8")
    blocks = marked_blocks(markdown)
    runnable = [b.text for b in blocks if b.kind == "runnable"]
    for command in ("simreport worlds", "simreport new plan", "simreport validate", "snakemake"):
        assert any(command in text for text in runnable), command
    assert any("simreport power" in text for text in runnable)
    # An output block always follows a runnable block, whose stdout it quotes.
    assert blocks[0].kind == "runnable"
    assert all(a.kind == "runnable" for a, b in pairwise(blocks) if b.kind == "output")
    assert named_files(markdown), "the tutorial names no output files"


# --------------------------------------------------------------------------- running it


@pytest.mark.slow
@pytest.mark.skipif(not (BIN / "snakemake").exists(), reason="snakemake is not next to python")
def test_the_tutorial_runs_as_written(tmp_path: Path) -> None:
    markdown = TUTORIAL.read_text(encoding="utf-8")
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text(encoding="utf-8"))
    work = copy_workflow(tmp_path / "repo", config)
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(work)  # the copy's package, in every process the commands start
    env.pop("SIMREPORT_LEDGER_URL", None)

    printed = ""
    for block in marked_blocks(markdown):
        if block.kind == "excerpt":
            quoted = work / str(block.source)
            text = quoted.read_text(encoding="utf-8") if quoted.is_file() else ""
            assert block.text in text, f"tutorial line {block.line}: not in {block.source}:\n{text}"
            continue
        if block.kind == "output":
            lines = printed.splitlines()
            missing = [s for s in block.text.splitlines() if s.strip() and s not in lines]
            assert not missing, f"tutorial line {block.line}: not printed: {missing}\n{printed}"
            continue
        proc = subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", block.text],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=BLOCK_TIMEOUT,
            check=False,
        )
        assert proc.returncode == 0, (
            f"tutorial line {block.line}: exit {proc.returncode}\n{block.text}\n"
            f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
        )
        printed = proc.stdout

    for name in named_files(markdown):
        assert sorted(work.glob(name)), f"the tutorial names {name}, which the steps did not make"
