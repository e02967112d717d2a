"""methods.md / methods.html: every number agrees with audit.json, plan text is escaped, the page is
self-contained and the output is byte-for-byte deterministic."""

from __future__ import annotations

import copy
import html
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from markdown_it import MarkdownIt

from simreport.analysis.audit_document import AuditDoc
from simreport.core.canonical import content_hash
from simreport.core.errors import InputError
from simreport.core.files import write_json
from simreport.report.methods import (
    md_code,
    md_escape,
    methods_html,
    methods_markdown,
    methods_title,
    write_methods,
)
from simreport.report.naming import audit_fingerprint
from tests.support.browser import needs_chromium, render

EXAMPLE_PLAN = Path(__file__).resolve().parents[2] / "examples" / "prisoners_dilemma" / "audit.yaml"
HOSTILE = (
    "<script>alert(1)</script>",
    "a|b*c_",
    "[click](javascript:alert(1))",
    "back\\slash `tick` **bold** _em_",
    "# not a heading\n- not a list",
    "<b>bold</b> &amp; AT&T #1",
    "![img](x.png) <http://example.org>",
)


# --------------------------------------------------------------------------- fixtures


# `audit_dir` and `audit` (a real small audit of the prisoner's dilemma example) come from
# conftest.py.


def markdown(audit: dict[str, Any]) -> str:
    """methods.md of a (hand-edited) audit.json, checked against its model first."""
    return methods_markdown(AuditDoc.model_validate(audit))


def title(audit: dict[str, Any]) -> str:
    return methods_title(AuditDoc.model_validate(audit))


def fingerprint(audit: dict[str, Any]) -> str:
    return audit_fingerprint(AuditDoc.model_validate(audit))


@pytest.fixture(scope="module")
def text(audit: dict[str, Any]) -> str:
    return markdown(audit)


def _render(markdown_text: str) -> str:
    rendered: str = MarkdownIt("commonmark", {"html": False}).render(markdown_text)
    return rendered


def _section(text: str, heading: str) -> str:
    """The body of one `## heading` section."""
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"no section {heading!r}"
    return match.group(1)


def _with_models(audit: dict[str, Any]) -> dict[str, Any]:
    """Hand-edited: two models, a second base, a provider override, failures, an infinite d."""
    edited = copy.deepcopy(audit)
    edited["plan"]["models"] = ["model-a", "model-b"]
    edited["plan"]["base"]["llm"]["provider"] = "openai"
    edited["options"]["providerOverride"] = "offline"
    edited["options"]["includeIncomplete"] = True
    edited["conditions"][1]["isBase"] = True
    edited["summary"].update(failed=3, incomplete=2, excluded=4, used=26)
    first = edited["metrics"][0]
    edited["tests"][first][0]["cohenD"] = "inf"
    edited["tests"][first][1].update(mwuP=None, holmP=None, tested=False)
    return edited


# --------------------------------------------------------------------------- escaping


@pytest.mark.parametrize("hostile", HOSTILE)
def test_md_escape_renders_back_to_the_literal_text(hostile: str) -> None:
    escaped = md_escape(hostile)
    assert "\n" not in escaped
    rendered = _render(f"Text {escaped} end.")
    # One paragraph whose text is the input with its whitespace collapsed: no tag, link or
    # emphasis was created from it.
    literal = " ".join(hostile.split())
    assert rendered == f"<p>Text {html.escape(literal, quote=False)} end.</p>\n"


def test_md_escape_escapes_the_markdown_specials() -> None:
    assert md_escape("<script>alert(1)</script>") == r"\<script\>alert(1)\</script\>"
    assert md_escape("a|b*c_") == r"a\|b\*c\_"
    assert md_escape("x\\y`z#[w]") == r"x\\y\`z\#\[w\]"
    assert md_escape("Smith & Jones") == "Smith & Jones"  # a bare & starts no entity
    assert md_escape("&amp;") == r"\&amp;"


@pytest.mark.parametrize("value", ["plain", "has `one` tick", "``double``", "`edge", "<i>x</i>"])
def test_md_code_keeps_the_value_literal(value: str) -> None:
    rendered = _render(md_code(value))
    assert rendered == f"<p><code>{html.escape(value, quote=False)}</code></p>\n"


def test_md_code_shows_non_strings_as_json() -> None:
    assert md_code(["instructions", "goals"]) == '`["instructions","goals"]`'
    assert md_code("") == '`""`'


def test_hostile_plan_strings_cannot_reach_the_page(audit: dict[str, Any]) -> None:
    edited = copy.deepcopy(audit)
    edited["plan"]["title"] = "<script>alert(1)</script> a|b*c_"
    edited["plan"]["base"]["name"] = "[click](javascript:alert(1))"
    edited["plan"]["axes"][0]["levels"] = ["<b>bold</b>", "`tick`"]
    edited["plan"]["axes"][0]["dimension"] = "# heading\n* item"
    edited["grade"]["reasons"] = ["<img src=x onerror=alert(1)>"]
    text = markdown(edited)
    assert text.startswith(r"# Methods: \<script\>alert(1)\</script\> a\|b\*c\_" + "\n")
    assert r"\[click\](javascript:alert(1))" in text
    page = methods_html(text, title(edited))
    for forbidden in ("<script", "<b>", "<img", "<ul>", "<li>"):
        assert forbidden not in page
    # The only links are the page's own navigation.
    assert re.findall(r'href="([^"]*)"', page) == ["report.html", "../index.html", "audit.json"]
    assert page.count("<a ") == 3
    plain = methods_html(markdown(audit), "plain")
    for emphasis in (r"<em>.*?</em>", r"<strong>.*?</strong>"):
        assert re.findall(emphasis, page) == re.findall(emphasis, plain)
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt; a|b*c_" in page
    assert "<code>&lt;b&gt;bold&lt;/b&gt;</code>" in page
    # Only the template's own headings: one h1 and the fixed h2 sections.
    assert page.count("<h1>") == 1
    assert re.findall(r"<h2>(.*?)</h2>", page) == re.findall(r"^## (.*)$", text, re.M)


# --------------------------------------------------------------------------- content


def test_numbers_agree_with_audit_json(audit: dict[str, Any], text: str) -> None:
    summary = audit["summary"]
    plan = audit["plan"]
    bases = sum(1 for c in audit["conditions"] if c["isBase"])
    assert f"the audit has {summary['conditions']} conditions: {bases} base and " in text
    assert f"{summary['conditions'] - bases} perturbed" in text
    assert f"Each condition was run {plan['replications']} times" in text
    assert f"{summary['runs']} runs in all" in text
    exclusions = _section(text, "Exclusions")
    assert (
        f"Of the {summary['runs']} runs, {summary['failed']} failed and "
        f"{summary['incomplete']} finished incomplete" in exclusions
    )
    assert (
        f"In all, {summary['excluded']} runs were excluded and {summary['used']} entered"
        in exclusions
    )
    assert "includeIncomplete was not set" in exclusions
    for metric, rows in audit["tests"].items():
        m = sum(1 for r in rows if r["mwuP"] is not None)
        assert f"*m* = {m} for `{metric}`" in text
    assert f"is **{audit['grade']['grade']}**." in text
    for reason in audit["grade"]["reasons"]:
        assert md_escape(reason) in text
    assert f"`{plan['hash']}`" in text
    assert f"simreport {audit['software']['simreport']}" in text
    assert f"root seed {plan['base']['seed']}," in text
    assert f"{audit['cost']['llmCalls']} model calls" in text


def test_every_number_in_the_text_comes_from_the_audit(audit: dict[str, Any], text: str) -> None:
    """No stray figure: each integer in the prose is a count, setting or convention of the audit."""
    known = {
        audit["summary"][k] for k in ("conditions", "runs", "failed", "incomplete", "used")
    } | {audit["summary"]["excluded"], audit["plan"]["replications"], audit["schemaVersion"]}
    known |= {len(rows) for rows in audit["tests"].values()}
    known |= {sum(1 for r in rows if r.get("tested")) for rows in audit["tests"].values()}
    known |= {audit["plan"]["base"][k] for k in ("seed", "steps")}
    known |= {audit["plan"]["base"]["population"]["n"]}
    known |= {v for v in audit["cost"].values() if isinstance(v, int)}  # totals, not the tables
    known |= {0, 1, 2, 5, 8, 10, 30, 95, 100, 2000}  # the grade rule, TRAILS codes, conventions
    known |= {int(s) for s in re.findall(r"\d+", audit["grade"]["rule"])}
    known |= {audit["family"]["primaryRows"], audit["family"]["secondaryRows"]}
    known |= {sum(1 for rows in audit["tests"].values() for r in rows if r.get("tested"))}
    known |= {sum(1 for rows in audit["tests"].values() for r in rows if r.get("paired"))}
    # How many tested rows each test and each interval method decided.
    for key in ("test", "intervalMethod", "equivalenceTest"):
        names = [r.get(key) for rows in audit["tests"].values() for r in rows if r.get("tested")]
        known |= {names.count(name) for name in names if name}
    # Notes and the method of the power analysis are quoted as audit.json words them.
    quoted = [(audit.get("power") or {}).get("method") or ""] + [
        row.get("note") or "" for rows in (audit.get("noiseFloor") or {}).values() for row in rows
    ]
    known |= {int(s) for text in quoted for s in re.findall(r"\d+", text)}
    code_free = re.sub(r"`[^`]*`|\b[DR]\d\b|[DR]1–[DR]\d|SHA-256|Wasserstein-1", " ", text)
    numbers = {int(n) for n in re.findall(r"(?<![\w.])\d+(?![\w.])", code_free)}
    assert numbers <= known, numbers - known


def test_design_and_scenario_are_described(audit: dict[str, Any], text: str) -> None:
    base = audit["plan"]["base"]
    design = _section(text, "Design")
    assert "varied one at a time" in design
    assert f'"{md_escape(base["name"])}"' in design
    assert f"built-in `{base['world']}` world for {base['steps']} steps" in design
    assert f"population of {base['population']['n']} agents" in design
    assert f"makes a {audit['plan']['claimType']} claim" in design
    for cond in audit["conditions"]:
        if cond["identicalToBase"]:
            assert f"`{cond['id']}`" in design


def test_each_axis_has_its_code_dimension_level_kind_and_levels(
    audit: dict[str, Any], text: str
) -> None:
    section = _section(text, "Perturbation axes")
    paragraphs = [p for p in section.split("\n\n") if p.strip()]
    for axis in audit["plan"]["axes"]:
        levels = " or ".join(md_code(v) for v in axis["levels"])
        sentence = (
            f"Axis `{axis['id']}` (TRAILS {axis['code']}, {axis['dimension']}; "
            f"{axis['level']} level) sets `{axis['target']}` to {levels}"
        )
        holding = [p for p in paragraphs if sentence in p]
        assert len(holding) == 1, sentence
        kind_lead = {"design": "the design of the simulation", "representation": "representation"}
        assert kind_lead[axis["kind"]] in holding[0].split(". ")[0]


def test_the_seed_lineage_it_states_is_the_one_the_runs_used(
    audit: dict[str, Any], text: str
) -> None:
    base = audit["plan"]["base"]
    seeds = _section(text, "Replications and seeds")
    assert f"seed path (`{json.dumps(base['seedPath'])}` in the base scenario)" in seeds
    assert "appends *r* to the scenario's seed path" in seeds
    assert "No clock" in seeds
    for run in audit["runs"]:
        assert run["seedPath"] == [*base["seedPath"], run["replication"]]


def test_single_model_and_temperature(audit: dict[str, Any], text: str) -> None:
    llm = audit["plan"]["base"]["llm"]
    models = _section(text, "Models")
    assert f"the single model `{llm['model']}` through the `{llm['provider']}` provider" in models
    assert "temperature was fixed at 0" in models
    assert f"temperature of `{llm['temperature']}`" in models  # what the audit overrode
    assert "overridden" not in models


def test_statistics_name_every_convention(text: str) -> None:
    stats = _section(text, "Statistical analysis")
    for phrase in (
        "two-sided Mann–Whitney *U* test",
        "fewer than 8 values and the pooled sample has no ties",
        "normal approximation with the tie-corrected variance and a continuity correction",
        "Holm's step-down procedure within each metric",
        "Cohen's *d* with the pooled standard deviation",
        "95% percentile bootstrap interval (2000 resamples",
        "seeded from the plan hash",
        "Wasserstein-1",
        "Cliff's delta",
        "no target distribution",
    ):
        assert phrase in stats, phrase


def test_models_override_failures_and_include_incomplete(audit: dict[str, Any]) -> None:
    edited = _with_models(audit)
    text = markdown(edited)
    assert "varied one at a time" in text
    assert "run under each of the two models" in text
    assert "each of the two models `model-a` and `model-b`" in text
    assert "(the base of the same model)" in text
    assert (
        "(set through `llm.model`) through the `offline` provider (overridden for this audit; "
        "the scenario names `openai`)." in text
    )
    exclusions = _section(text, "Exclusions")
    assert "3 failed and 2 finished incomplete" in exclusions
    assert "includeIncomplete was set" in exclusions
    assert "In all, 4 runs were excluded and 26 entered the statistics." in exclusions
    first = edited["metrics"][0]
    m = sum(1 for r in edited["tests"][first] if r["tested"])
    assert m == sum(1 for r in audit["tests"][first] if r["tested"]) - 1
    assert f"*m* = {m} for `{first}`" in text


def test_full_factorial_target_distribution_and_untested_metric(audit: dict[str, Any]) -> None:
    edited = copy.deepcopy(audit)
    edited["plan"]["design"] = "full_factorial"
    edited["plan"]["hypothesis"]["targetDistribution"] = {"choice": {"C": 0.5, "D": 0.5}}
    last = edited["metrics"][-1]
    for row in edited["tests"][last]:
        row.update(mwuP=None, holmP=None, tested=False)
    edited["notes"][last] = "no condition has usable runs with a finite value of this metric"
    text = markdown(edited)
    assert "full factorial design" in text
    assert "target distribution for `choice`" in text
    assert "SimBench-style normalised total variation distance" in text
    assert f"*m* = 0 for `{last}`" in text
    assert f"No test was possible for `{last}`: {edited['notes'][last]}." in text


def test_an_audit_without_axes_says_so(audit: dict[str, Any]) -> None:
    edited = copy.deepcopy(audit)
    edited["plan"]["axes"] = []
    text = markdown(edited)
    assert "The plan perturbs nothing: it has no axes." in text
    assert "runs the base condition only" in text


def test_a_plan_without_its_base_scenario_still_reads(audit: dict[str, Any]) -> None:
    """What a plan leaves out is said in words rather than crash or print None."""
    edited = copy.deepcopy(audit)
    del edited["plan"]["base"]
    edited["plan"].update(baseScenario="s.yaml", title=None)
    text = markdown(edited)
    assert "None" not in text
    assert "Its base scenario (file `s.yaml`) runs an unnamed world." in text
    assert "`s.yaml`) runs an unnamed world. The" in text  # no steps or population to state


def test_methods_refuse_an_audit_of_an_older_schema(audit_dir: Path, tmp_path: Path) -> None:
    old = json.loads((audit_dir / "audit.json").read_text(encoding="utf-8"))
    old["schemaVersion"] = 1
    write_json(tmp_path / "audit.json", old)
    with pytest.raises(InputError) as caught:
        write_methods(tmp_path)
    assert caught.value.path == "schemaVersion" and caught.value.exit_code == 2
    assert f"simreport analyse {tmp_path}" in str(caught.value.expected)  # what to run
    assert not (tmp_path / "methods.md").exists()


def test_paragraphs_are_prose_not_lists(text: str) -> None:
    rendered = _render(text)
    assert "<ul>" not in rendered and "<ol>" not in rendered and "<table>" not in rendered
    for paragraph in re.findall(r"<p>(.*?)</p>", rendered, re.S):
        assert paragraph.rstrip().endswith((".", ")")), paragraph[-80:]


# --------------------------------------------------------------------------- the page and files


def test_methods_html_is_one_self_contained_page(audit: dict[str, Any], text: str) -> None:
    page = methods_html(text, "Methods: <hostile> & co")
    assert page.startswith("<!doctype html>\n")
    assert f'<html lang="en" data-audit-sha256="{fingerprint(audit)}">' in page
    assert '<meta charset="utf-8">' in page
    assert "<title>Methods: &lt;hostile&gt; &amp; co</title>" in page
    assert "<style>" in page
    for forbidden in ("<script", "http://", "https://", "<link", "src=", "@import", "url("):
        assert forbidden not in page
    assert f"<code>{audit['plan']['hash']}</code>" in page
    assert page.rstrip().endswith("</html>")


def test_write_methods_is_atomic_and_deterministic(audit_dir: Path, tmp_path: Path) -> None:
    md_path, html_path = write_methods(audit_dir)
    assert (md_path, html_path) == (audit_dir / "methods.md", audit_dir / "methods.html")
    first = (md_path.read_bytes(), html_path.read_bytes())
    # The same audit elsewhere, read back from the same JSON: the same bytes.
    copy_dir = tmp_path / "copy"
    copy_dir.mkdir()
    shutil.copy(audit_dir / "audit.json", copy_dir / "audit.json")
    write_methods(copy_dir)
    assert ((copy_dir / "methods.md").read_bytes(), (copy_dir / "methods.html").read_bytes()) == (
        first
    )
    write_methods(audit_dir)
    assert (md_path.read_bytes(), html_path.read_bytes()) == first
    assert not [p for p in audit_dir.iterdir() if p.name.endswith(".tmp")]
    assert first[1].decode("utf-8") == methods_html(
        first[0].decode("utf-8"),
        title(json.loads((audit_dir / "audit.json").read_text(encoding="utf-8"))),
    )


def test_the_dict_and_its_json_give_the_same_text(audit_dir: Path) -> None:
    """audit.json carries infinities as strings; the text does not depend on that."""
    plan, conditions_doc = (audit_dir / "plan.json"), (audit_dir / "conditions.json")
    assert plan.is_file() and conditions_doc.is_file()
    from simreport.analysis.audit import analyse, load_audit_inputs

    inputs = load_audit_inputs(audit_dir)
    fresh = analyse(*inputs)
    read_back = json.loads((audit_dir / "audit.json").read_text(encoding="utf-8"))
    # What the analysis directory adds beside the statistics (its provenance) is not in `fresh`.
    fresh.update({k: v for k, v in read_back.items() if k not in fresh})
    assert markdown(fresh) == markdown(read_back)


def test_write_methods_rejects_a_directory_without_an_audit(tmp_path: Path) -> None:
    write_json(tmp_path / "audit.json", {"something": "else"})
    with pytest.raises(InputError) as refused:
        write_methods(tmp_path)
    # Read, but not an audit: neither a file that cannot be read nor a broken audit contract.
    assert type(refused.value) is InputError
    assert (refused.value.file, refused.value.path) == (str(tmp_path / "audit.json"), None)


# --------------------------------------------------------------------------- browser


@pytest.mark.slow
@needs_chromium
def test_methods_html_renders_in_headless_chromium(audit_dir: Path, tmp_path: Path) -> None:
    _, html_path = write_methods(audit_dir)
    page = render(html_path.resolve().as_uri(), tmp_path / "chromium", window="1280,1600")
    page.check_screenshot(min_bytes=20_000, size=(1280, 1600))
    assert page.network_requests == []
    audit = json.loads((audit_dir / "audit.json").read_text(encoding="utf-8"))
    assert "<h2>Statistical analysis</h2>" in page.dom
    assert f"<code>{audit['plan']['hash']}</code>" in page.dom
    assert "<script" not in page.dom


# --------------------------------------------------------------------------- untested, fixed, power


def test_identical_conditions_are_said_to_be_untested(audit: dict[str, Any], text: str) -> None:
    identical = [c["id"] for c in audit["conditions"] if c["identicalToBase"]]
    assert identical
    design = _section(text, "Design")
    assert "run but not tested" in design
    assert "no *p* value, no place in the Holm correction" in design
    assert "tested like the others" not in text
    stats = _section(text, "Statistical analysis")
    assert "conditions identical to the base are not tested" in stats
    for metric, rows in audit["tests"].items():
        assert f"*m* = {sum(1 for r in rows if r['tested'])} for `{metric}`" in stats


def test_settings_no_axis_touches_are_listed(audit: dict[str, Any], text: str) -> None:
    fixed = _section(text, "Settings held fixed")
    base = audit["plan"]["base"]
    assert f"`params.matching` = `{base['params']['matching']}`" in fixed
    assert f"`steps` = `{base['steps']}`" in fixed
    assert f"`population.n` = `{base['population']['n']}`" in fixed
    for axis in audit["plan"]["axes"]:
        assert f"`{axis['target']}` =" not in fixed, axis["target"]
    for described in ("seed", "seedPath", "replicationId", "llm.temperature", "llm.model"):
        assert f"`{described}` =" not in fixed, described
    assert "`name` =" not in fixed and "`hypothesis" not in fixed


def test_settings_under_a_targeted_list_are_listed_item_by_item(audit: dict[str, Any]) -> None:
    edited = copy.deepcopy(audit)
    edited["plan"]["axes"] = [
        {
            "id": "c",
            "level": "micro",
            "kind": "design",
            "dimension": "internal state",
            "target": "executors.0.options.components",
            "levels": [[]],
        }
    ]
    edited["plan"]["base"] = {
        "world": "prisoners_dilemma",
        "executors": [
            {"agents": "all", "options": {"components": ["memory"], "params": {}}},
            {"agents": "rest", "options": {"components": ["goals"]}},
        ],
        "population": {"fields": {"age": {"kind": "categorical", "values": [1, 2]}}},
        "llm": {"model": "m", "budgetCalls": None},
    }
    fixed = _section(markdown(edited), "Settings held fixed")
    assert "`executors.0.agents` = `all`" in fixed
    assert '`executors.1.options.components` = `["goals"]`' in fixed
    assert "`population.fields.age.values` = `[1,2]`" in fixed
    assert "executors.0.options.components" not in fixed
    assert "params" not in fixed and "budgetCalls" not in fixed  # empty settings are not listed


def test_power_and_noise_floor_are_stated_when_the_audit_has_them(audit: dict[str, Any]) -> None:
    edited = copy.deepcopy(audit)
    metric = edited["metrics"][0]
    cell = {"nBase": 12, "nCond": 12, "paired": False, "test": "Mann-Whitney U"}
    edited["power"].update(
        power=0.8,
        alphaFamily=0.05,
        method="normal approximation",
        metrics={
            metric: [
                {**cell, "condition": "a", "alpha": 0.05, "mde": 1.25, "note": None},
                {**cell, "condition": "b", "alpha": 0.025, "mde": "inf", "note": None},
                {**cell, "condition": "c", "alpha": 0.0125, "mde": 2.5, "note": None},
            ],
            "other": [
                {**cell, "condition": "a", "alpha": 0.05, "mde": None, "note": "not computable"}
            ],
        },
    )
    edited["noiseFloor"] = {
        metric: [
            {
                "base": "base",
                "n": 12,
                "splits": 200,
                "flipRate": 0.045,
                "alpha": 0.05,
                "scope": "halves",
                "companions": [],
                "sizes": [6, 6],
                "note": None,
            }
        ]
    }
    stats = _section(markdown(edited), "Statistical analysis")
    assert "at power 0.8 and a family α of 0.05, each at the Holm-adjusted α of its rank" in stats
    assert "Method: normal approximation." in stats
    assert f"was from 1.25 to 2.5 for `{metric}` and none could be computed for `other`." in stats
    assert (
        f"was 4.5% for `{metric}`, each over 200 splits of 12 replications into two halves at "
        "α = 0.05." in stats
    )
    edited["noiseFloor"][metric][0].update(
        scope="audit", companions=["seed=9"], sizes=[12, 12], splits=2000
    )
    stats = _section(markdown(edited), "Statistical analysis")
    assert (
        f"was 4.5% for `{metric}`, each over 2000 splits of the base's 12 replications pooled with "
        "the condition that changes only the seeds, into groups of 12 and 12 at α = 0.05." in stats
    )
    edited["noiseFloor"][metric][0].update(flipRate=None, note="too few <values> to split")
    stats = _section(markdown(edited), "Statistical analysis")
    assert "No noise floor (the share of splits" in stats
    assert "could be computed: too few \\<values\\> to split." in stats
    # An audit whose power analysis has no row and whose noise floor has no base says so.
    bare = copy.deepcopy(audit)
    bare["power"]["metrics"] = {}
    bare["noiseFloor"] = {}
    plain = _section(markdown(bare), "Statistical analysis")
    assert "Minimum detectable" not in plain and "noise floor, the share" not in plain
    assert "could be computed: no base had enough runs." in plain


def test_axis_and_level_expectations_are_stated(audit: dict[str, Any]) -> None:
    edited = copy.deepcopy(audit)
    metric = edited["metrics"][0]
    axis = edited["plan"]["axes"][0]["id"]
    edited["plan"]["hypothesis"]["axes"] = {axis: {metric: "decrease"}}
    edited["plan"]["hypothesis"]["levels"] = {f"{axis}=x": {metric: "increase"}}
    design = _section(markdown(edited), "Design")
    assert (
        f"expects, more specifically, for axis `{axis}`, `{metric}` to decrease and for "
        f"condition `{axis}=x`, `{metric}` to increase; the most specific expectation applies"
        in design
    )


def test_the_text_names_the_audit_json_it_was_written_from(audit: dict[str, Any]) -> None:
    from simreport.report.methods import AUDIT_HASH_TEXT, audit_hash_of

    text = markdown(audit)
    # The fingerprint the model gives is the content hash of audit.json as written.
    assert audit_hash_of(text) == fingerprint(audit) == content_hash(audit)
    assert f"{AUDIT_HASH_TEXT}`{fingerprint(audit)}`." in _section(
        text, "Software and reproducibility"
    )
    # Plan text cannot forge the sentence: its backticks are escaped, and the text's own
    # sentence comes last.
    edited = copy.deepcopy(audit)
    edited["plan"]["title"] = f"{AUDIT_HASH_TEXT}`{'0' * 64}`"
    assert audit_hash_of(markdown(edited)) == fingerprint(edited)
    assert audit_hash_of("no such sentence") is None


def test_an_unchanged_expectation_reads_as_a_verb(audit: dict[str, Any]) -> None:
    edited = copy.deepcopy(audit)
    first = edited["metrics"][0]
    edited["plan"]["hypothesis"]["outcomes"] = {first: "unchanged"}
    edited["plan"]["hypothesis"]["margins"] = {first: 0.1}
    design = _section(markdown(edited), "Design")
    assert f"`{first}` to stay unchanged" in design
    assert "to unchanged" not in design
