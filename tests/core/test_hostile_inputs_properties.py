"""Standing guard: random mutations of the example plans, scenarios and workflow configs.

Every mutated document either validates, or is refused with exit code 2 and one located line on
stderr — never a traceback, never an "internal error", never a partial output, and always within
a bounded time and memory. Hypothesis draws the mutations from the example documents (the shape
the schemas accept) and breaks them: keys removed or added, values replaced with other types,
extreme numbers, control characters, nested junk.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import resource
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from simreport.cli import main
from simreport.core.errors import SimreportError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
PLAN_EXAMPLES = ["prisoners_dilemma", "echo_chamber"]

# Each example must finish quickly: validation of a broken plan is parsing plus a few hundred
# condition scenarios at most.
DEADLINE_MS = 10_000
PEAK_RSS_LIMIT_MB = 3_000

EXTREMES: list[Any] = [
    0,
    -1,
    10**12,
    -(10**18),
    1e308,
    float("nan"),
    float("inf"),
    "",
    "\x00",
    "\x1b[31mred",
    "../../etc/passwd",
    "index.html",
    "a|b=c@d",
    True,
    None,
    [],
    {},
    [[[[]]]],
]

leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**15), max_value=10**15),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(EXTREMES),
)
json_values = st.recursive(
    leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(st.text(max_size=8), children, max_size=3),
    ),
    max_leaves=8,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into a JSON-like tree (the root included)."""
    out = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            out.extend(_paths(child, (*prefix, key)))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            out.extend(_paths(child, (*prefix, index)))
    return out


def _parent(doc: Any, path: tuple[Any, ...]) -> Any:
    for part in path[:-1]:
        doc = doc[part]
    return doc


@st.composite
def mutated(draw: st.DrawFn, original: Any) -> Any:
    """`original` with one to three random mutations."""
    doc = copy.deepcopy(original)
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        paths = [p for p in _paths(doc) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = _parent(doc, path)
        key = path[-1]
        action = draw(st.sampled_from(["delete", "replace", "extreme", "add", "wrap", "stringify"]))
        if action == "delete":
            del parent[key]
        elif action == "replace":
            parent[key] = draw(json_values)
        elif action == "extreme":
            parent[key] = draw(st.sampled_from(EXTREMES))
        elif action == "add":
            target = parent[key] if isinstance(parent[key], dict) else parent
            if isinstance(target, dict):
                target[draw(st.text(min_size=1, max_size=10))] = draw(json_values)
            else:
                target.append(draw(json_values))
        elif action == "wrap":
            parent[key] = [parent[key]]
        else:
            parent[key] = json.dumps(parent[key], allow_nan=True)
    return doc


def _load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _write(path: Path, doc: Any, as_json: bool) -> Path:
    if as_json:
        target = path.with_suffix(".json")
        target.write_text(json.dumps(doc, allow_nan=True), encoding="utf-8")
    else:
        target = path.with_suffix(".yaml")
        target.write_text(yaml.safe_dump(doc, allow_unicode=False), encoding="utf-8")
    return target


def _cli(args: list[str]) -> tuple[int, str]:
    """Run the CLI in this process; return its exit code and stderr."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(args)
    return code, err.getvalue()


def _assert_clean_refusal(code: int, stderr: str, files: list[Path]) -> None:
    assert code in (0, 2), f"exit {code}: {stderr}"
    assert "Traceback" not in stderr and "internal error" not in stderr, stderr
    if code == 2:
        lines = [line for line in stderr.splitlines() if line.strip()]
        assert len(lines) == 1, stderr
        assert lines[0].startswith("simreport: "), stderr
        assert any(f.name in lines[0] for f in files), f"no file named: {stderr}"


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


COMMON = settings(
    deadline=DEADLINE_MS,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=True,
)


@pytest.mark.parametrize("example", PLAN_EXAMPLES)
@settings(COMMON, max_examples=40)
@given(data=st.data())
def test_mutated_plans_validate_or_are_refused_in_one_line(
    example: str, data: st.DataObject
) -> None:
    plan = _load_yaml(EXAMPLES / example / "audit.yaml")
    scenario = _load_yaml(EXAMPLES / example / "scenario.yaml")
    which = data.draw(st.sampled_from(["plan", "scenario", "both"]))
    as_json = data.draw(st.booleans())
    if which in ("plan", "both"):
        plan = data.draw(mutated(plan))
    if which in ("scenario", "both"):
        scenario = data.draw(mutated(scenario))
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        scenario_file = _write(folder / "scenario", scenario, as_json)
        if isinstance(plan, dict) and plan.get("baseScenario") == "scenario.yaml":
            plan["baseScenario"] = scenario_file.name
        plan_file = _write(folder / "audit", plan, as_json)
        files = [plan_file, scenario_file]

        code, stderr = _cli(["validate", str(plan_file)])
        _assert_clean_refusal(code, stderr, files)
        listed, listed_err = _cli(["conditions", str(plan_file)])
        _assert_clean_refusal(listed, listed_err, files)
        assert listed == code

        if code == 2:
            # A refused plan writes nothing, not even plan.json.
            out = folder / "out"
            audited, audit_err = _cli(
                ["audit", str(plan_file), "--out", str(out), "--concurrency", "1"]
            )
            _assert_clean_refusal(audited, audit_err, files)
            assert audited == 2
            assert not out.exists(), sorted(p.name for p in out.rglob("*"))
    assert _peak_rss_mb() < PEAK_RSS_LIMIT_MB


@pytest.mark.parametrize("example", [*PLAN_EXAMPLES, "refund_desk"])
@settings(COMMON, max_examples=40)
@given(data=st.data())
def test_mutated_scenarios_validate_or_are_refused_in_one_line(
    example: str, data: st.DataObject
) -> None:
    scenario = data.draw(mutated(_load_yaml(EXAMPLES / example / "scenario.yaml")))
    as_json = data.draw(st.booleans())
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if example == "refund_desk":
            # The testbed scenario reads its asset library relative to its own folder.
            (folder / "assets").symlink_to(EXAMPLES / example / "assets")
        scenario_file = _write(folder / "scenario", scenario, as_json)
        code, stderr = _cli(["validate", str(scenario_file)])
        _assert_clean_refusal(code, stderr, [scenario_file])
        if code == 2:
            out = folder / "run"
            ran, run_err = _cli(["run", str(scenario_file), "--out", str(out)])
            _assert_clean_refusal(ran, run_err, [scenario_file])
            assert ran == 2 and not out.exists()
    assert _peak_rss_mb() < PEAK_RSS_LIMIT_MB


@pytest.mark.slow
@settings(COMMON, max_examples=12)
@given(data=st.data())
def test_small_mutated_audits_finish_or_are_refused(data: st.DataObject) -> None:
    """Plans that validate also run: to the end, or refused before any run (the run limit)."""
    plan = data.draw(mutated(_load_yaml(EXAMPLES / "prisoners_dilemma" / "audit.yaml")))
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "scenario.yaml").write_text(
            (EXAMPLES / "prisoners_dilemma" / "scenario.yaml").read_text(encoding="utf-8"),
            encoding="utf-8",
        )
        plan_file = _write(folder / "audit", plan, False)
        out = folder / "out"
        code, stderr = _cli(
            [
                "audit",
                str(plan_file),
                "--out",
                str(out),
                "--replications",
                "1",
                "--concurrency",
                "1",
                "--max-runs",
                "16",
            ]
        )
        _assert_clean_refusal(code, stderr, [plan_file, folder / "scenario.yaml"])
        if code == 0:
            event("audited")
            assert (out / "audit.json").is_file() and (out / "report.html").is_file()
        else:
            event("refused")
            assert not out.exists()


# The shipped config, with one small plan so that each case expands quickly.
CONFIG = {
    **_load_yaml(ROOT / "config" / "config.yaml"),
    "plans": [str(EXAMPLES / "prisoners_dilemma" / "audit.yaml")],
}


@settings(COMMON, max_examples=40)
@given(config=mutated(CONFIG))
def test_mutated_workflow_configs_load_or_are_refused(config: Any) -> None:
    """What the Snakefile does with its config: validate against the schema, then expand every
    plan. A broken config is refused by one or the other with a message, never a crash."""
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate

    from simreport.workflow import load_workflow

    try:
        validate(config, str(ROOT / "config" / "schema.yaml"))
    except WorkflowError:
        return
    try:
        load_workflow(config, root=ROOT)
    except SimreportError as exc:
        line = exc.one_line()
        assert "\n" not in line and line, line
        assert exc.exit_code == 2
    assert _peak_rss_mb() < PEAK_RSS_LIMIT_MB
