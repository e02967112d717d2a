"""Hostile documents are refused before anything is built from them (alias bombs, recursive
aliases, duplicate keys, control characters), and pages never print a control character raw."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tracemalloc
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from yaml.composer import Composer
from yaml.constructor import BaseConstructor

from simreport.core.errors import DocumentError, DuplicateKey, SchemaError
from simreport.core.files import (
    ALIAS_EXPANSION_LIMIT,
    CONTROL_CHARACTERS,
    check_config_file,
    load_document,
    parse_document,
    visible_control_characters,
)
from tests.support.refusals import refused

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
PD = EXAMPLES / "prisoners_dilemma"

# Every control character a page must not print raw, and one each of the kinds allowed.
CONTROLS = "\x00\x07\x1b\x7f\x85\x9b"


def billion_laughs(key: str) -> str:
    """Nine levels of nine aliases each under `key`: 9**9 strings once expanded, under 1 kB."""
    lines = [f"{key}:", '  - &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for level in range(1, 9):
        lines.append(f"  - &l{level} [" + ", ".join([f"*l{level - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def _cli() -> list[str]:
    exe = Path(sys.executable).with_name("simreport")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "simreport.cli"]


# Runs the command with its address space capped (so a regression fails instead of swapping the
# machine) and reports its exit code, stderr and peak resident memory. How long a refusal takes is
# bench/bench_refusals.py's measure.
_MEASURE = """
import json, resource, subprocess, sys

def cap():
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

proc = subprocess.run(sys.argv[1:], capture_output=True, text=True, preexec_fn=cap, timeout=60)
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
peak_mb = peak / 2**20 if sys.platform == "darwin" else peak / 2**10
print(json.dumps({"code": proc.returncode, "stderr": proc.stderr, "peakMb": peak_mb}))
"""


def _measured(argv: list[str], cwd: Path) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-c", _MEASURE, *argv],
        capture_output=True,
        text=True,
        cwd=cwd,
        check=True,
        timeout=120,
    )
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def _laughing_plan(tmp: Path) -> Path:
    shutil.copy(PD / "scenario.yaml", tmp / "scenario.yaml")
    plan = tmp / "audit.yaml"
    plan.write_text("title: laughs\nbaseScenario: scenario.yaml\n" + billion_laughs("axes"))
    return plan


def _laughing_scenario(tmp: Path) -> Path:
    scenario = tmp / "scenario.yaml"
    scenario.write_text("world: prisoners_dilemma\n" + billion_laughs("params"))
    return scenario


def _laughing_asset(tmp: Path) -> Path:
    folder = tmp / "assets" / "refund-agent"
    folder.mkdir(parents=True)
    asset = folder / "9.9.9.yaml"
    asset.write_text(
        "kind: agent\nname: refund-agent\nversion: 9.9.9\n" + billion_laughs("content")
    )
    return asset


def _laughing_config(tmp: Path) -> Path:
    config = tmp / "config.yaml"
    config.write_text("title: laughs\n" + billion_laughs("plans"))
    return config


@dataclass
class Work:
    """What the YAML loader did: nodes composed (aliases included) and documents built."""

    composed: int = 0
    constructed: int = 0


@pytest.fixture
def work(monkeypatch: pytest.MonkeyPatch) -> Work:
    """Counts the YAML loader's work, in PyYAML's own classes (the bounded loader's bases)."""
    counted = Work()
    compose, construct = Composer.compose_node, BaseConstructor.construct_document

    def composing(loader: Composer, parent: Any, index: Any) -> Any:
        counted.composed += 1
        return compose(loader, parent, index)

    def constructing(loader: BaseConstructor, node: Any) -> Any:
        counted.constructed += 1
        return construct(loader, node)

    monkeypatch.setattr(Composer, "compose_node", composing)
    monkeypatch.setattr(BaseConstructor, "construct_document", constructing)
    return counted


LAUGHS_NODES = 93
"""The nodes billion_laughs writes out (the mapping, its key, the list, 1 + 9 in the first level
and in each of the other eight): reading it may compose no more than these."""
FIRST_LEVEL_PAST_THE_LIMIT = 7
"""The line of `&l5`, the first level whose expansion (9**6 + … nodes) passes the limit."""


# --------------------------------------------------------------------------- alias bombs


@pytest.mark.parametrize(
    "make", [_laughing_plan, _laughing_scenario, _laughing_asset, _laughing_config]
)
def test_billion_laughs_is_refused_by_the_cli_quickly_and_in_little_memory(
    tmp_path: Path, make: Any
) -> None:
    document = make(tmp_path)
    assert len(document.read_bytes()) < 1500
    measured = _measured([*_cli(), "validate", str(document)], tmp_path)
    err = measured["stderr"].strip()
    assert measured["code"] == 2, err
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    # The line names the file and the limit that its aliases pass.
    assert err.startswith(f"simreport: {document}:") and f"{ALIAS_EXPANSION_LIMIT:,}" in err
    assert measured["peakMb"] < 200, measured


def test_billion_laughs_is_refused_at_the_first_level_past_the_limit(work: Work) -> None:
    text = billion_laughs("axes")
    tracemalloc.start()
    with pytest.raises(DocumentError) as caught:
        parse_document(text, Path("laughs.yaml"))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # Bounded by what is written, not by what it stands for: no node composed twice, nothing
    # built, refused where the expansion first passes the limit.
    assert 0 < work.composed <= LAUGHS_NODES and work.constructed == 0
    assert peak < 20 * 2**20
    assert (caught.value.file, caught.value.line) == ("laughs.yaml", FIRST_LEVEL_PAST_THE_LIMIT)
    assert caught.value.kind == "alias_expansion"


def test_the_asset_library_refuses_an_alias_bomb(tmp_path: Path, work: Work) -> None:
    from simreport.kernel.testbed.assets import AssetError, AssetLibrary

    _laughing_asset(tmp_path)
    with pytest.raises(AssetError) as caught:
        AssetLibrary(tmp_path / "assets").resolve("refund-agent@9.9.9", "agent", "sut")
    assert caught.value.ref == "refund-agent@9.9.9"
    refused = caught.value.__context__  # the document error the asset's file raised
    assert isinstance(refused, DocumentError) and refused.kind == "alias_expansion"
    assert 0 < work.composed <= LAUGHS_NODES + 6 and work.constructed == 0  # + kind, name, …


def test_a_workflow_config_is_checked_by_the_same_loader(tmp_path: Path) -> None:
    with pytest.raises(DocumentError) as caught:
        check_config_file(_laughing_config(tmp_path))
    assert caught.value.kind == "alias_expansion"
    config = tmp_path / "twice.yaml"
    config.write_text("plans: []\ntitle: a\ntitle: b\n")
    with pytest.raises(DuplicateKey) as caught:
        check_config_file(config)
    assert (caught.value.path, caught.value.line, caught.value.first_line) == ("title", 3, 2)
    check_config_file(ROOT / "config" / "config.yaml")


def test_aliases_may_add_nodes_up_to_the_limit() -> None:
    base = "base: &b [" + ", ".join(str(i) for i in range(99)) + "]\n"  # 100 nodes
    uses = (ALIAS_EXPANSION_LIMIT // 100) - 10
    under = base + "uses: [" + ", ".join(["*b"] * uses) + "]\n"
    document = parse_document(under, Path("under.yaml"))
    assert document.data == yaml.safe_load(under)
    assert document.lines["uses.0.98"] == 1
    over = base + "uses: [" + ", ".join(["*b"] * (uses + 20)) + "]\n"
    with pytest.raises(DocumentError) as caught:
        parse_document(over, Path("over.yaml"))
    assert caught.value.kind == "alias_expansion"


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("a: &a [1, *a]\n", 1),
        ("a: &a\n  b: 1\n  c: *a\n", 3),
        ("outer: &o\n  - inner: &i\n      - *o\n", 3),
    ],
)
def test_a_recursive_alias_is_refused(text: str, line: int) -> None:
    with pytest.raises(DocumentError) as caught:
        parse_document(text, Path("loop.yaml"))
    assert (caught.value.kind, caught.value.line) == ("alias_loop", line)


ANCHORED = """\
defaults: &defaults
  temperature: 0
  model: offline-base
runs:
  - <<: *defaults
    model: offline-large
  - <<: [*defaults]
seeds: &seeds [1, 2, 3]
again: *seeds
"""


def test_anchors_aliases_and_merge_keys_load_as_before() -> None:
    document = parse_document(ANCHORED, Path("anchored.yaml"))
    assert document.data == yaml.safe_load(ANCHORED)
    assert document.data["runs"][0] == {"temperature": 0, "model": "offline-large"}
    assert document.line_of("runs.0.model") == 6
    assert document.line_of("runs.1.temperature") == 2  # where the merged value is written
    assert document.line_of("again.2") == 8


def test_every_example_loads_as_plain_pyyaml_loads_it() -> None:
    files = [*EXAMPLES.rglob("*.yaml"), *(ROOT / "config").glob("*.yaml")]
    assert len(files) > 10
    for path in files:
        assert load_document(path).data == yaml.safe_load(path.read_text("utf-8")), path


# --------------------------------------------------------------------------- duplicate keys


def test_a_duplicate_yaml_key_names_both_lines() -> None:
    text = "title: a\nparams:\n  framing: neutral\n  memoryWindow: 5\n  framing: risk\n"
    with pytest.raises(DuplicateKey) as caught:
        parse_document(text, Path("plan.yaml"))
    error = caught.value
    assert (error.file, error.line, error.path) == ("plan.yaml", 5, "params.framing")
    assert (error.key, error.first_line) == ("framing", 3)
    assert error.one_line().startswith("plan.yaml:5: params.framing: ")


def test_yaml_keys_are_compared_as_loaded() -> None:
    assert parse_document("1: a\n'1': b\n", Path("k.yaml")).data == {1: "a", "1": "b"}
    with pytest.raises(DuplicateKey) as caught:
        parse_document("yes: 1\ntrue: 2\n", Path("k.yaml"))
    assert (caught.value.key, caught.value.line, caught.value.first_line) == ("true", 2, 1)


def test_a_merged_key_overridden_is_not_a_duplicate() -> None:
    text = "base: &b {x: 1, y: 2}\nuse:\n  <<: *b\n  x: 3\n"
    assert parse_document(text, Path("m.yaml")).data["use"] == {"x": 3, "y": 2}


def test_a_duplicate_json_key_names_the_key_and_its_path() -> None:
    text = '{"plan": {"axes": [{"id": "a", "levels": [1], "id": "b"}]}}'
    with pytest.raises(DuplicateKey) as caught:
        parse_document(text, Path("audit.json"))
    assert (caught.value.path, caught.value.key) == ("plan.axes.0.id", "id")
    assert parse_document('{"a": {"id": 1}, "b": {"id": 2}}', Path("ok.json")).data["b"]


# --------------------------------------------------------------------------- control characters


def _example_copy(tmp: Path) -> Path:
    target = tmp / "pd"
    shutil.copytree(PD, target)
    return target


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


@pytest.mark.parametrize(
    ("file", "old", "new", "line", "dotted", "code"),
    [
        (
            "audit.yaml",
            "title: Prisoner's dilemma — cooperation under framing and representation changes",
            'title: "Prisoner\'s \\e[2J dilemma"',
            2,
            "title",
            "U+001B",
        ),
        (
            "audit.yaml",
            "[moralised, risk]",
            '[moralised, "ri\\0sk"]',
            14,
            "axes.0.levels.1",
            "U+0000",
        ),
        (
            "scenario.yaml",
            "name: Iterated prisoner's dilemma",
            'name: "Iterated \\e]0;owned\\a"',
            3,
            "name",
            "U+001B",
        ),
        ("scenario.yaml", "framing: neutral", 'framing: "neu\\x9btral"', None, None, "U+009B"),
    ],
)
def test_control_characters_in_a_plan_or_scenario_are_refused_where_they_are(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    file: str,
    old: str,
    new: str,
    line: int | None,
    dotted: str | None,
    code: str,
) -> None:
    folder = _example_copy(tmp_path)
    _edit(folder / file, old, new)
    expected_line = line or next(
        n for n, text in enumerate((folder / file).read_text().splitlines(), 1) if "neu" in text
    )
    expected_path = dotted or "params.framing"
    for validated in {file, "audit.yaml"}:
        refusal = refused(capsys, ["validate", str(folder / validated)])
        assert refusal.code == 2 and not CONTROL_CHARACTERS.search(refusal.line)
        error = refusal.error
        assert isinstance(error, DocumentError) and error.kind == "control_character"
        where = (str(folder / file), expected_line, expected_path)
        assert (error.file, error.line, error.path) == where
        assert code in error.message


def test_control_characters_in_json_and_in_keys_are_refused() -> None:
    with pytest.raises(DocumentError) as caught:
        parse_document('{"llm": {"model": "x\\u001b[31m"}}', Path("s.json"))
    assert caught.value.path == "llm.model" and "U+001B" in caught.value.message
    with pytest.raises(DocumentError) as caught:
        parse_document('params:\n  "fr\\0m": 1\n', Path("s.yaml"))
    assert caught.value.line == 2 and caught.value.path == "params.fr\u2400m"
    plain = 'a: "tab\\there"\nb: |\n  two\n  lines\r\n'
    assert parse_document(plain, Path("ok.yaml")).data == yaml.safe_load(plain)


def test_control_characters_become_visible_stand_ins() -> None:
    assert visible_control_characters("a\x00b\x1bc\x7fd\x85e\tf\n") == (
        "a\u2400b\u241bc\u2421d\ufffde\tf\n"
    )


def _poison(value: Any, keys: set[str]) -> Any:
    """`value` with control characters added to the strings under `keys` (anywhere in it)."""
    if isinstance(value, dict):
        return {
            k: (v + CONTROLS if k in keys and isinstance(v, str) else _poison(v, keys))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_poison(v, keys) for v in value]
    return value


def test_pages_print_no_control_character_raw(audit_dir: Path, tmp_path: Path) -> None:
    from simreport.report import write_methods, write_report, write_site

    folder = tmp_path / "pd"
    shutil.copytree(audit_dir, folder)
    audit = json.loads((folder / "audit.json").read_text(encoding="utf-8"))
    scenario_name = audit["plan"]["base"]["name"]
    audit = _poison(audit, {"title", "name", "description", "message", "dimension"})
    audit["plan"]["axes"][0]["levels"] = [f"moral{CONTROLS}", "risk\x1b[2J"]
    audit["runs"][0]["failure"] = {"message": f"boom{CONTROLS}", "stage": "run", "type": "X"}
    # The base scenario's name is a name: its contract refuses control characters outright.
    audit["plan"]["base"]["name"] += CONTROLS
    (folder / "audit.json").write_text(json.dumps(audit), encoding="utf-8")
    with pytest.raises(SchemaError) as refused:
        write_report(folder)
    assert refused.value.path == "plan.base.name" and refused.value.exit_code == 2
    audit["plan"]["base"]["name"] = scenario_name
    (folder / "audit.json").write_text(json.dumps(audit), encoding="utf-8")

    write_report(folder)
    write_methods(folder)
    write_site(tmp_path / "site", [("pd", folder)], title=f"Audits{CONTROLS}")
    pages = {
        "report.html": folder / "report.html",
        "methods.md": folder / "methods.md",
        "methods.html": folder / "methods.html",
        "index.html": tmp_path / "site" / "index.html",
    }
    for name, page in pages.items():
        text = page.read_text(encoding="utf-8")
        found = CONTROL_CHARACTERS.search(text)
        assert found is None, f"{name}: U+{ord(found.group()):04X}"
        assert "\u241b" in text, name  # the escape was there, shown as its control picture
