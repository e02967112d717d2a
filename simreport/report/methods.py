"""methods.md and methods.html: the methods section of a paper, written from audit.json alone.

The Markdown comes from a Jinja template with HTML autoescaping off; instead every value the
template prints goes through `md_escape` unless it is already Markdown this module made (`Md`),
so a plan title or level can never open a link, a heading or an HTML tag. The HTML page is the
Markdown rendered by markdown-it with raw HTML disabled. Same audit, same bytes.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from jinja2 import Environment
from markdown_it import MarkdownIt

from ..analysis.audit_document import (
    AuditDoc,
    ComparisonRow,
    NoiseFloorRow,
    Options,
    PlanSection,
    PowerSection,
)
from ..core.canonical import canonical_json
from ..core.files import visible_control_characters, write_atomic
from ..core.overrides import lookup
from ..core.schema import PlanHypothesis, Scenario
from . import naming, verdict
from .document import read_audit_document
from .templating import environment

TEMPLATE = "methods.md.j2"
BOOTSTRAP_DRAWS = 2000
EXACT_MWU_BELOW = 8
AUDIT_HASH_TEXT = (
    "The content hash (SHA-256 of the canonical JSON) of the audit.json behind this text is "
)
"""Opens the sentence that names the audit.json the text was written from (`audit_hash_of`)."""
_AUDIT_HASH = re.compile(re.escape(AUDIT_HASH_TEXT) + r"`([0-9a-f]{64})`")
_PER_RUN = ("replicationId", "seedPath")
"""Settings each replication sets for itself: described with the seeds, not as fixed."""
_DESCRIBED_BELOW = ("seed", "llm.model", "llm.provider", "llm.temperature")
"""Settings the Replications and Models sections describe (with any override of them)."""

_DESIGNS = {"one_at_a_time": "one at a time", "full_factorial": "full factorial"}
# Markdown punctuation that could start emphasis, a link, a heading, a table cell, a code span or
# an HTML tag, and the backslash itself. `&` only where it would start a character reference.
_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>#|])|&(?=#?[A-Za-z0-9]+;)")
_BACKTICKS = re.compile(r"`+")


class Md(str):
    """Markdown that is safe to print as it is: escaped plan text, or text this module wrote."""

    __slots__ = ()


_WHITESPACE = re.compile(r"\s+")


def _one_line(text: str) -> str:
    # Every value sits inside a paragraph: a newline could start a heading or a list item there.
    return _WHITESPACE.sub(" ", text)


def md_escape(value: Any) -> Md:
    """`value` as literal Markdown text: special characters backslash-escaped, whitespace
    (newlines included) collapsed to single spaces."""
    if isinstance(value, Md):
        return value
    text = _one_line(str(value))
    return Md(_MD_SPECIAL.sub(lambda m: "\\" + (m.group(1) or "&"), text))


def md_code(value: Any) -> Md:
    """`value` as an inline code span, fenced with more backticks than it contains.
    Non-strings are shown as compact JSON."""
    text = _one_line(value if isinstance(value, str) else canonical_json(value)).strip()
    if not text:
        return Md('`""`')
    runs = _BACKTICKS.findall(text)
    fence = "`" * (max((len(r) for r in runs), default=0) + 1)
    if text.startswith("`") or text.endswith("`"):
        text = f" {text} "
    return Md(f"{fence}{text}{fence}")


def join_words(items: Iterable[Any], conjunction: str = "and") -> Md:
    """`a`, `a and b`, `a, b and c`: each item escaped unless it is already Markdown."""
    parts = [md_escape(i) for i in items]
    if len(parts) <= 2:
        return Md(f" {conjunction} ".join(parts))
    return Md(", ".join(parts[:-1]) + f" {conjunction} " + parts[-1])


_NUMBER_WORDS = (
    "no", "one", "two", "three", "four", "five", "six",
    "seven", "eight", "nine", "ten", "eleven", "twelve",
)  # fmt: skip


def number_word(n: int, capital: bool = False) -> Md:
    """Small counts as words (to open a sentence), larger ones as digits."""
    word = _NUMBER_WORDS[n] if 0 <= n < len(_NUMBER_WORDS) else str(n)
    return Md(word[:1].upper() + word[1:] if capital else word)


def plural(n: int, singular: str, plural_form: str | None = None) -> Md:
    return Md(f"{n} {singular if n == 1 else (plural_form or singular + 's')}")


def _finalize(value: Any) -> Any:
    """What `{{ ... }}` prints: Markdown as it is, numbers as digits, anything else escaped."""
    if isinstance(value, Md):
        return value
    if value is None:
        return Md("unknown")
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    return md_escape(value)


# --------------------------------------------------------------------------- audit → context


def _value_text(value: Any) -> str:
    return value if isinstance(value, str) else canonical_json(value)


def _axes(plan: PlanSection, base: Mapping[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for axis in plan.axes:
        found, base_value = lookup(base, axis.target)
        rows.append(
            {
                "id": md_code(axis.id),
                "code": axis.code,
                "dimension": axis.dimension,
                "level": axis.level,
                "kind": axis.kind,
                "target": md_code(axis.target),
                "levels": [md_code(_value_text(v)) for v in axis.levels],
                "base_value": md_code(_value_text(base_value)) if found else None,
            }
        )
    return rows


def _axis_groups(axes: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Axes by kind: design, then representation, then any other kind; plan order within."""
    kinds = [k for k in ("design", "representation") if any(a["kind"] == k for a in axes)]
    kinds += sorted({str(a["kind"]) for a in axes} - set(kinds))
    return [{"kind": k, "axes": [a for a in axes if a["kind"] == k]} for k in kinds]


def _tests(audit: AuditDoc, metrics: Sequence[str]) -> list[dict[str, Any]]:
    """Per metric, how many tested rows Holm's correction ran over (a row without a p value, or
    of a condition identical to the base, is not counted)."""
    return [
        {
            "metric": md_code(metric),
            "m": len(verdict.tested_rows(audit, metric)),
            "note": audit.notes.get(metric),
        }
        for metric in metrics
    ]


def _expectations(metrics: Sequence[str], outcomes: Mapping[str, str]) -> list[Md]:
    """`a` and `b` to increase, `c` to decrease: metrics grouped by expected direction, in the
    order the directions first appear among the metrics (metrics first, then the rest sorted)."""
    ordered = [m for m in metrics if m in outcomes] + sorted(set(outcomes) - set(metrics))
    groups: dict[str, list[Md]] = {}
    for metric in ordered:
        groups.setdefault(outcomes[metric], []).append(md_code(metric))
    return [
        Md(f"{join_words(names)} to {_VERBS.get(d, md_escape(d))}") for d, names in groups.items()
    ]


_VERBS = {"unchanged": "stay unchanged"}
"""An expected outcome as the verb after "expects `m` to" (the others read as they are)."""


def _specific_expectations(table: Mapping[str, Mapping[str, str]], what: str) -> list[Md]:
    """`for axis `x`, `m` to decrease`: the hypothesis's per-axis or per-level directions."""
    return [
        Md(f"for {what} {md_code(name)}, {join_words(_expectations([], table[name]))}")
        for name in sorted(table)
        if table[name]
    ]


def _fixed_settings(plan: PlanSection, base: Mapping[str, Any], options: Options) -> list[Md]:
    """`path` = `value` for every setting of the base scenario that no axis targets, in document
    order: what the audit held fixed. Left out: the scenario's name, description and hypothesis
    (not settings), empty settings, and what other sections describe: the seeds, the model, its
    provider and temperature, and whatever the audit's model override replaced."""
    targets = [axis.target for axis in plan.axes]
    skip = {*_PER_RUN, "name", "description", "hypothesis", *_DESCRIBED_BELOW}
    for key, value in (options.llm_override or {}).items():
        if value is not None:
            skip.add(f"llm.{key}")
    out: list[Md] = []

    def walk(node: Any, path: str) -> None:
        if path in skip or path in targets:
            return
        under = [t for t in targets if path == "" or t.startswith(path + ".")]
        if isinstance(node, Mapping) and node:
            for key in node:
                walk(node[key], f"{path}.{key}" if path else str(key))
        elif isinstance(node, list) and node and under:
            for i, item in enumerate(node):
                walk(item, f"{path}.{i}")
        elif path and node is not None and node != {} and node != []:
            out.append(Md(f"{md_code(path)} = {md_code(_value_text(node))}"))

    walk(base, "")
    return out


def _power_sentences(power: PowerSection, metrics: Sequence[str]) -> list[Md]:
    """The minimum detectable |d| per metric (its range over the tested rows)."""
    table = power.metrics
    parts = []
    for metric in [m for m in metrics if m in table] + sorted(set(table) - set(metrics)):
        values = [
            row.mde for row in table[metric] if row.mde is not None and math.isfinite(row.mde)
        ]
        if not values:
            parts.append(Md(f"none could be computed for {md_code(metric)}"))
        elif min(values) == max(values):
            parts.append(Md(f"{_number(min(values))} for {md_code(metric)}"))
        else:
            parts.append(
                Md(f"from {_number(min(values))} to {_number(max(values))} for {md_code(metric)}")
            )
    return parts


def _noise_sentences(
    table: Mapping[str, Sequence[NoiseFloorRow]], metrics: Sequence[str]
) -> list[Md]:
    """The noise floor per metric (and base, with several); how it was measured is said once
    when every row shares it."""
    rows = [
        (metric, row, row.flip_rate)
        for metric in [m for m in metrics if m in table] + sorted(set(table) - set(metrics))
        for row in table[metric]
        if row.flip_rate is not None and math.isfinite(row.flip_rate)
    ]
    several_bases = len({row.base for _, row, _ in rows}) > 1
    setups = {_noise_setup(row) for _, row, _ in rows}
    parts = []
    for metric, row, rate in rows:
        base = f" (base {md_code(row.base)})" if several_bases else ""
        setup = f" over {_noise_setup(row)}" if len(setups) > 1 else ""
        parts.append(Md(f"{_number(100 * rate, 1)}% for {md_code(metric)}{base}{setup}"))
    if parts and len(setups) == 1:
        parts[-1] = Md(f"{parts[-1]}, each over {setups.pop()}")
    return parts


def _noise_missing(table: Mapping[str, Sequence[NoiseFloorRow]]) -> str | None:
    """Why no noise floor was computed (the first row's note), when not one row of it has a
    flip rate."""
    rows = [row for rows in table.values() for row in rows]
    if any(row.flip_rate is not None for row in rows):
        return None
    return next((row.note for row in rows if row.note), "no base had enough runs")


def _noise_setup(row: NoiseFloorRow) -> str:
    at = f"at α = {_number(row.alpha, 4)}"
    if row.scope == "halves":
        return f"{row.splits} splits of {row.n} replications into two halves {at}"
    twins = (
        "the condition that changes"
        if len(row.companions) == 1
        else f"the {len(row.companions)} conditions that change"
    )
    sizes = " and ".join(str(s) for s in row.sizes or ())
    return (
        f"{row.splits} splits of the base's {row.n} replications pooled with {twins} only the "
        f"seeds, into groups of {sizes} {at}"
    )


def _power_level(power: PowerSection) -> Md:
    """`power 0.8 and a family α of 0.05`, as the power analysis states them."""
    return join_words(
        [Md(f"power {_number(power.power)}"), Md(f"a family α of {_number(power.alpha_family, 4)}")]
    )


def _number(value: float, digits: int = 2) -> Md:
    text = f"{value:.{digits}f}"
    return Md(text.rstrip("0").rstrip(".") if "." in text else text)


def _provider_phrase(provider: str | None, override: str | None) -> Md:
    """` through the X provider`, naming an override and what it replaced; empty when unknown."""
    if override and override != provider:
        replaced = f"; the scenario names {md_code(provider)}" if provider else ""
        return Md(
            f" through the {md_code(override)} provider (overridden for this audit{replaced})"
        )
    if provider or override:
        return Md(f" through the {md_code(provider or override)} provider")
    return Md("")


def _engine(base: Scenario | None) -> Md:
    if base is not None and base.world:
        return Md(f"the built-in {md_code(base.world)} world")
    command = base.simulator.command if base is not None and base.simulator else None
    if command:
        return Md(f"an external simulator (command {md_code(' '.join(command))})")
    return Md("an unnamed world")


def context(audit: AuditDoc) -> dict[str, Any]:
    """Everything the methods template says, taken from audit.json."""
    plan, summary, options, grade = audit.plan, audit.summary, audit.options, audit.grade
    base = plan.base
    base_doc = plan.base_document()
    llm = base.llm if base is not None else None
    hypothesis = plan.hypothesis or (base.hypothesis if base is not None else None)
    conditions = audit.conditions
    metrics = audit.metrics
    outcomes = hypothesis.outcomes if hypothesis is not None else {}
    targets = (hypothesis.target_distribution if hypothesis is not None else None) or {}
    specific = hypothesis if isinstance(hypothesis, PlanHypothesis) else None
    replications = plan.replications
    temperature = llm.temperature if llm is not None else None
    n_bases = sum(1 for c in conditions if c.is_base)
    axes = _axes(plan, base_doc)
    override_model = (options.llm_override or {}).get("model")
    model = override_model or (llm.model if llm is not None else None)
    provider = llm.provider if llm is not None else None
    seed_path = base.seed_path if base is not None else []
    return {
        "title": plan.title or plan.id or "untitled audit",
        "plan_id": md_code(plan.id or "unnamed"),
        "plan_title": plan.title,
        "claim_type": plan.claim_type,
        "scenario_name": base.name if base is not None else None,
        "scenario_file": md_code(plan.base_scenario) if plan.base_scenario else None,
        "engine": _engine(base),
        "steps": base.steps if base is not None else None,
        "population": base.population.n if base is not None else None,
        "design": plan.design,
        "design_words": _DESIGNS.get(plan.design, plan.design),
        "axes": axes,
        "axis_groups": _axis_groups(axes),
        "conditions": summary.conditions,
        "bases": n_bases,
        "perturbed": len(conditions) - n_bases,
        "identical": [md_code(c.id) for c in conditions if c.identical_to_base],
        "metrics": [md_code(m) for m in metrics],
        "outcomes": _expectations(metrics, outcomes),
        "specific_outcomes": [
            *_specific_expectations(specific.axes if specific else {}, "axis"),
            *_specific_expectations(specific.levels if specific else {}, "condition"),
        ],
        "fixed": _fixed_settings(plan, base_doc, options),
        "targets": [md_code(name) for name in sorted(targets)],
        "replications": replications,
        "last_replication": max(replications - 1, 0),
        "runs": summary.runs,
        "seed": base.seed if base is not None else 0,
        "seed_path": md_code(canonical_json(seed_path)),
        "first_seed_path": md_code(canonical_json([*seed_path, 0])),
        "models": [md_code(m) for m in plan.models],
        "model": md_code(str(model)) if model else None,
        "offline": (options.provider_override or provider) == "offline",
        "via": _provider_phrase(provider, options.provider_override),
        "scenario_temperature": md_code(canonical_json(temperature))
        if temperature is not None and temperature != 0
        else None,
        "bootstrap_draws": BOOTSTRAP_DRAWS,
        "exact_below": EXACT_MWU_BELOW,
        "tests": _tests(audit, metrics),
        "holm": [Md(f"*m* = {t['m']} for {t['metric']}") for t in _tests(audit, metrics)],
        "power": _power_sentences(audit.power, metrics),
        "power_level": _power_level(audit.power),
        "power_method": audit.power.method,
        "factorial_method": audit.factorial_method,
        "noise": _noise_sentences(audit.noise_floor, metrics),
        "noise_missing": _noise_missing(audit.noise_floor),
        "failed": summary.failed,
        "incomplete": summary.incomplete,
        "excluded": summary.excluded,
        "used": summary.used,
        "include_incomplete": options.include_incomplete,
        "grade": grade.grade,
        "reasons": list(grade.reasons),
        "rule": grade.rule,
        "software": sorted(audit.software.model_dump(mode="json", by_alias=True).items()),
        "schema_version": audit.schema_version,
        "hash": md_code(plan.hash),
        "audit_hash": Md(AUDIT_HASH_TEXT + md_code(naming.audit_fingerprint(audit))),
        "llm_calls": audit.cost.llm_calls,
        "prompt_tokens": audit.cost.prompt_tokens,
        "completion_tokens": audit.cost.completion_tokens,
        "conclusions": _conclusions(audit, metrics),
        "decisions": md_escape(verdict.decisions(audit)),
    }


def _conclusions(audit: AuditDoc, metrics: Sequence[str]) -> dict[str, Any]:
    """What methods.md says of the conclusions: the tests that ran and on how many rows, how
    rows were paired, the family, the margins, the intervals and the achieved grade."""
    family = audit.family
    rows = [r for m in metrics for r in audit.tests.get(m, [])]
    tested = [r for r in rows if r.tested]

    def counted(method: Callable[[ComparisonRow], str | None]) -> list[Md]:
        counts: dict[str, int] = {}
        for r in tested:
            name = method(r)
            if name:
                counts[name] = counts.get(name, 0) + 1
        return [Md(f"{md_escape(name)} ({plural(n, 'row')})") for name, n in counts.items()]

    paired = sum(1 for r in tested if r.paired)
    unpaired_reasons = sorted({str(r.pairing) for r in tested if not r.paired})
    margins = {m: r.margin for m in metrics for r in audit.tests.get(m, [])}
    grade = audit.grade
    return {
        "tests": counted(lambda r: r.test),
        "intervals": counted(lambda r: r.interval_method),
        "equivalence": counted(lambda r: r.equivalence_test),
        "paired": paired,
        "tested": len(tested),
        "unpaired_reasons": [md_escape(r.removeprefix("unpaired: ")) for r in unpaired_reasons],
        "family_method": md_escape(family.method),
        "primary": [md_code(m) for m in family.primary_metrics],
        "secondary": [md_code(m) for m in family.secondary_metrics],
        "primary_rows": family.primary_rows,
        "alpha": family.alpha,
        "margins": [
            Md(f"±{_number(v, 3)} for {md_code(m)}") for m, v in margins.items() if v is not None
        ],
        "achieved": md_escape(grade.achieved) if grade.achieved else None,
        "achieved_reasons": [md_escape(r) for r in grade.achieved_reasons],
        "headline": md_escape(audit.verdict.headline),
    }


# --------------------------------------------------------------------------- rendering


def _environment() -> Environment:
    return environment(
        autoescape=False,  # Markdown, not HTML: escaping is md_escape, applied by _finalize
        trim_blocks=False,
        finalize=_finalize,
        filters=(
            ("md_escape", md_escape),
            ("md_code", md_code),
            ("join_words", join_words),
            ("plural", plural),
            ("number_word", number_word),
        ),
    )


def methods_markdown(audit: AuditDoc) -> str:
    """The methods section of an audit."""
    text = _environment().get_template(TEMPLATE).render(context(audit))
    # Paragraphs are single lines; blank lines the template's conditionals leave collapse to one.
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"


_CSS = """\
body { margin: 0 auto; max-width: 46rem; padding: 2rem 1.5rem 3rem; color: #1b1f24;
  background: #fff; font-family: Georgia, "Times New Roman", "Liberation Serif", serif;
  font-size: 17px; line-height: 1.6; }
h1 { font-size: 1.6rem; line-height: 1.25; margin: 0 0 1rem; overflow-wrap: anywhere; }
h2 { font-size: 1.15rem; margin: 2rem 0 .5rem; }
p { margin: .6rem 0; text-align: left; hyphens: auto; }
code { font-family: ui-monospace, Menlo, Consolas, "Liberation Mono", monospace;
  font-size: .82em; background: #f3f4f6; padding: 0 .2em; border-radius: .2em;
  overflow-wrap: anywhere; }
strong { font-weight: 700; }
nav { font-family: system-ui, -apple-system, "Segoe UI", Roboto, Arial, sans-serif;
  font-size: .9rem; margin: 0 0 1.5rem; }
nav a { color: #0b5cad; margin-right: 1rem; }
@media (max-width: 40rem) { body { padding: 1rem .75rem 2rem; font-size: 16px; } }
@media print { body { max-width: none; padding: 0; font-size: 11pt; } code { background: none; }
  nav { display: none; } }
"""


def _markdown_renderer() -> MarkdownIt:
    # Raw HTML in the Markdown is shown as text, never passed through; tables for plan authors
    # who paste their own.
    return MarkdownIt("commonmark", {"html": False}).enable("table")


def audit_hash_of(markdown_text: str) -> str | None:
    """The fingerprint of the audit.json a methods text was written from, as the text states it
    (None for a text that does not)."""
    # The text's own sentence closes it: an earlier look-alike could only come from plan text.
    found = _AUDIT_HASH.findall(markdown_text)
    return str(found[-1]) if found else None


def methods_html(markdown_text: str, title: str) -> str:
    """`markdown_text` as one self-contained HTML page: no scripts, no external resources. Its
    <html> carries the audit fingerprint the text states, and it links to the audit's report,
    its audit.json and the site's index."""
    body = _markdown_renderer().render(visible_control_characters(markdown_text))
    fingerprint = audit_hash_of(markdown_text)
    stamp = f' {naming.AUDIT_STAMP}="{fingerprint}"' if fingerprint else ""
    return (
        "<!doctype html>\n"
        f'<html lang="en"{stamp}>\n'
        "<head>\n"
        '<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{html.escape(visible_control_characters(title))}</title>\n"
        f"<style>\n{_CSS}</style>\n"
        "</head>\n"
        "<body>\n"
        '<nav aria-label="Pages of this audit"><a href="report.html">Report</a>'
        '<a href="../index.html">All audits</a><a href="audit.json">audit.json</a></nav>\n'
        f"<main>\n{body}</main>\n"
        "</body>\n"
        "</html>\n"
    )


def methods_title(audit: AuditDoc) -> str:
    plan = audit.plan
    return f"Methods: {plan.title or plan.id or 'untitled audit'}"


def write_methods(audit_dir: str | Path) -> tuple[Path, Path]:
    """Read `audit_dir/audit.json`; write `methods.md` and `methods.html` there (atomically).

    Args:
        audit_dir: an analysed audit directory.

    Returns:
        The paths of methods.md and methods.html.

    Raises:
        InputError: audit.json is missing, not an audit, or breaks its contract.
    """
    root = Path(audit_dir)
    audit = read_audit_document(root / "audit.json")
    markdown_text = methods_markdown(audit)
    md_path, html_path = root / "methods.md", root / "methods.html"
    write_atomic(md_path, markdown_text)
    write_atomic(html_path, methods_html(markdown_text, methods_title(audit)))
    return md_path, html_path
