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
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from jinja2 import Environment
from markdown_it import MarkdownIt

from ..core.canonical import canonical_json, parse_number
from ..core.errors import InputError
from ..core.files import load_document, visible_control_characters, write_atomic
from ..core.overrides import lookup
from . import naming, verdict
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


def _int(value: Any) -> int:
    number = parse_number(value)
    if (
        isinstance(number, bool)
        or not isinstance(number, (int, float))
        or not math.isfinite(number)
    ):
        return 0
    return int(number)


def _value_text(value: Any) -> str:
    return value if isinstance(value, str) else canonical_json(value)


def _axes(plan: Mapping[str, Any], base: Mapping[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for axis in plan.get("axes") or []:
        target = str(axis.get("target") or "")
        found, base_value = lookup(base, target) if target else (False, None)
        rows.append(
            {
                "id": md_code(str(axis.get("id"))),
                "code": axis.get("code"),
                "dimension": str(axis.get("dimension") or "unnamed dimension"),
                "level": str(axis.get("level") or "unspecified"),
                "kind": str(axis.get("kind") or "unspecified"),
                "target": md_code(target) if target else None,
                "levels": [md_code(_value_text(v)) for v in axis.get("levels") or []],
                "base_value": md_code(_value_text(base_value)) if found else None,
            }
        )
    return rows


def _axis_groups(axes: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Axes by kind: design, then representation, then any other kind; plan order within."""
    kinds = [k for k in ("design", "representation") if any(a["kind"] == k for a in axes)]
    kinds += sorted({str(a["kind"]) for a in axes} - set(kinds))
    return [{"kind": k, "axes": [a for a in axes if a["kind"] == k]} for k in kinds]


def _tests(audit: Mapping[str, Any], metrics: Sequence[str]) -> list[dict[str, Any]]:
    """Per metric, how many tested rows Holm's correction ran over (a row without a p value, or
    of a condition identical to the base, is not counted)."""
    notes = audit.get("notes") or {}
    return [
        {
            "metric": md_code(metric),
            "m": len(verdict.tested_rows(audit, metric)),
            "note": notes.get(metric),
        }
        for metric in metrics
    ]


def _expectations(metrics: Sequence[str], outcomes: Mapping[str, Any]) -> list[Md]:
    """`a` and `b` to increase, `c` to decrease: metrics grouped by expected direction, in the
    order the directions first appear among the metrics (metrics first, then the rest sorted)."""
    ordered = [m for m in metrics if m in outcomes] + sorted(set(outcomes) - set(metrics))
    groups: dict[str, list[Md]] = {}
    for metric in ordered:
        groups.setdefault(str(outcomes[metric]), []).append(md_code(metric))
    return [Md(f"{join_words(names)} to {md_escape(d)}") for d, names in groups.items()]


def _specific_expectations(hypothesis: Mapping[str, Any], key: str, what: str) -> list[Md]:
    """`for axis `x`, `m` to decrease`: the hypothesis's per-axis or per-level directions."""
    table = hypothesis.get(key) or {}
    out = []
    for name in sorted(table):
        outcomes = table[name] or {}
        if isinstance(outcomes, Mapping) and outcomes:
            out.append(
                Md(f"for {what} {md_code(str(name))}, {join_words(_expectations([], outcomes))}")
            )
    return out


def _fixed_settings(
    plan: Mapping[str, Any], base: Mapping[str, Any], options: Mapping[str, Any]
) -> list[Md]:
    """`path` = `value` for every setting of the base scenario that no axis targets, in document
    order: what the audit held fixed. Left out: the scenario's name, description and hypothesis
    (not settings), empty settings, and what other sections describe: the seeds, the model, its
    provider and temperature, and whatever the audit's model override replaced."""
    targets = [str(a.get("target")) for a in plan.get("axes") or [] if a.get("target")]
    skip = {*_PER_RUN, "name", "description", "hypothesis", *_DESCRIBED_BELOW}
    for key, value in (options.get("llmOverride") or {}).items():
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


def _power_sentences(audit: Mapping[str, Any], metrics: Sequence[str]) -> list[Md]:
    """The minimum detectable |d| per metric (its range over the tested rows), when audit.json
    has the power analysis."""
    power = audit.get("power")
    if not isinstance(power, Mapping):
        return []
    table = power.get("metrics") or {}
    parts = []
    for metric in [m for m in metrics if m in table] + sorted(set(table) - set(metrics)):
        values = [
            v
            for row in table[metric] or []
            if (v := verdict.as_float(row.get("mde"))) is not None and math.isfinite(v)
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


def _noise_sentences(audit: Mapping[str, Any], metrics: Sequence[str]) -> list[Md]:
    """The noise floor per metric (and base, with several), when audit.json has it; how it was
    measured is said once when every row shares it."""
    table = audit.get("noiseFloor")
    if not isinstance(table, Mapping):
        return []
    rows = [
        (metric, row, rate)
        for metric in [m for m in metrics if m in table] + sorted(set(table) - set(metrics))
        for row in table[metric] or []
        if (rate := verdict.as_float(row.get("flipRate"))) is not None and math.isfinite(rate)
    ]
    several_bases = len({str(row.get("base")) for _, row, _ in rows}) > 1
    setups = {_noise_setup(row) for _, row, _ in rows}
    parts = []
    for metric, row, rate in rows:
        base = f" (base {md_code(str(row.get('base')))})" if several_bases else ""
        setup = f" over {_noise_setup(row)}" if len(setups) > 1 else ""
        parts.append(Md(f"{_number(100 * rate, 1)}% for {md_code(metric)}{base}{setup}"))
    if parts and len(setups) == 1:
        parts[-1] = Md(f"{parts[-1]}, each over {setups.pop()}")
    return parts


def _noise_missing(audit: Mapping[str, Any]) -> str | None:
    """Why no noise floor was computed (the first row's note), when audit.json has a noise
    floor and not one row of it has a flip rate."""
    table = audit.get("noiseFloor")
    if not isinstance(table, Mapping):
        return None
    rows = [row for rows in table.values() for row in rows or [] if isinstance(row, Mapping)]
    if any(verdict.as_float(row.get("flipRate")) is not None for row in rows):
        return None
    return next((str(row["note"]) for row in rows if row.get("note")), "no base had enough runs")


def _noise_setup(row: Mapping[str, Any]) -> str:
    alpha = verdict.as_float(row.get("alpha"))
    at = f" at α = {_number(alpha, 4)}" if alpha is not None else ""
    return f"{_int(row.get('splits'))} splits of {_int(row.get('n'))} replications{at}"


def _power_level(audit: Mapping[str, Any]) -> Md:
    """`power 0.8 and a family α of 0.05`, as the power analysis states them."""
    power = audit.get("power") or {}
    level = verdict.as_float(power.get("power"))
    alpha = verdict.as_float(power.get("alphaFamily"))
    parts = []
    if level is not None:
        parts.append(f"power {_number(level)}")
    if alpha is not None:
        parts.append(f"a family α of {_number(alpha, 4)}")
    return join_words(Md(p) for p in parts)


def _number(value: float, digits: int = 2) -> Md:
    text = f"{value:.{digits}f}"
    return Md(text.rstrip("0").rstrip(".") if "." in text else text)


def _provider_phrase(provider: Any, override: Any) -> Md:
    """` through the X provider`, naming an override and what it replaced; empty when unknown."""
    if override and override != provider:
        replaced = f"; the scenario names {md_code(str(provider))}" if provider else ""
        return Md(
            f" through the {md_code(str(override))} provider (overridden for this audit{replaced})"
        )
    if provider or override:
        return Md(f" through the {md_code(str(provider or override))} provider")
    return Md("")


def _engine(base: Mapping[str, Any]) -> Md:
    world = base.get("world")
    if world:
        return Md(f"the built-in {md_code(str(world))} world")
    simulator = base.get("simulator") or {}
    command = simulator.get("command") if isinstance(simulator, Mapping) else None
    if command:
        return Md(f"an external simulator (command {md_code(' '.join(map(str, command)))})")
    return Md("an unnamed world")


def context(audit: Mapping[str, Any]) -> dict[str, Any]:
    """Everything the methods template says, taken from audit.json."""
    plan: Mapping[str, Any] = audit.get("plan") or {}
    base: Mapping[str, Any] = plan.get("base") or {}
    summary: Mapping[str, Any] = audit.get("summary") or {}
    options: Mapping[str, Any] = audit.get("options") or {}
    grade: Mapping[str, Any] = audit.get("grade") or {}
    llm: Mapping[str, Any] = base.get("llm") or {}
    population: Mapping[str, Any] = base.get("population") or {}
    hypothesis: Mapping[str, Any] = plan.get("hypothesis") or base.get("hypothesis") or {}
    conditions: Sequence[Mapping[str, Any]] = audit.get("conditions") or []
    metrics = [str(m) for m in audit.get("metrics") or []]
    outcomes: Mapping[str, Any] = hypothesis.get("outcomes") or {}
    targets: Mapping[str, Any] = hypothesis.get("targetDistribution") or {}
    software: Mapping[str, Any] = audit.get("software") or {}
    cost: Mapping[str, Any] = audit.get("cost") or {}
    replications = _int(plan.get("replications", 1))
    temperature = llm.get("temperature")
    design = str(plan.get("design") or "one_at_a_time")
    n_bases = sum(1 for c in conditions if c.get("isBase"))
    title = plan.get("title") or plan.get("id") or "untitled audit"
    axes = _axes(plan, base)
    override_model = (options.get("llmOverride") or {}).get("model")
    return {
        "title": str(title),
        "plan_id": md_code(str(plan.get("id") or "unnamed")),
        "plan_title": plan.get("title"),
        "claim_type": str(plan.get("claimType") or "exploratory"),
        "scenario_name": base.get("name"),
        "scenario_file": md_code(str(plan["baseScenario"])) if plan.get("baseScenario") else None,
        "engine": _engine(base),
        "steps": _int(base.get("steps")) if base.get("steps") is not None else None,
        "population": _int(population.get("n")) if population.get("n") is not None else None,
        "design": design,
        "design_words": _DESIGNS.get(design, design),
        "axes": axes,
        "axis_groups": _axis_groups(axes),
        "conditions": _int(summary.get("conditions", len(conditions))),
        "bases": n_bases,
        "perturbed": len(conditions) - n_bases,
        "identical": [md_code(str(c.get("id"))) for c in conditions if c.get("identicalToBase")],
        "metrics": [md_code(m) for m in metrics],
        "outcomes": _expectations(metrics, outcomes),
        "specific_outcomes": [
            *_specific_expectations(hypothesis, "axes", "axis"),
            *_specific_expectations(hypothesis, "levels", "condition"),
        ],
        "fixed": _fixed_settings(plan, base, options),
        "targets": [md_code(str(name)) for name in sorted(targets)],
        "replications": replications,
        "last_replication": max(replications - 1, 0),
        "runs": _int(summary.get("runs")),
        "seed": base.get("seed", 0),
        "seed_path": md_code(canonical_json(base.get("seedPath") or [])),
        "first_seed_path": md_code(canonical_json([*(base.get("seedPath") or []), 0])),
        "models": [md_code(str(m)) for m in plan.get("models") or []],
        "model": md_code(str(override_model or llm["model"]))
        if (override_model or llm.get("model"))
        else None,
        "offline": (options.get("providerOverride") or llm.get("provider")) == "offline",
        "via": _provider_phrase(llm.get("provider"), options.get("providerOverride")),
        "scenario_temperature": md_code(canonical_json(temperature))
        if temperature is not None and parse_number(temperature) != 0
        else None,
        "bootstrap_draws": BOOTSTRAP_DRAWS,
        "exact_below": EXACT_MWU_BELOW,
        "tests": _tests(audit, metrics),
        "holm": [Md(f"*m* = {t['m']} for {t['metric']}") for t in _tests(audit, metrics)],
        "power": _power_sentences(audit, metrics),
        "power_level": _power_level(audit),
        "power_method": (audit.get("power") or {}).get("method"),
        "factorial_method": audit.get("factorialMethod"),
        "noise": _noise_sentences(audit, metrics),
        "noise_missing": _noise_missing(audit),
        "failed": _int(summary.get("failed")),
        "incomplete": _int(summary.get("incomplete")),
        "excluded": _int(summary.get("excluded")),
        "used": _int(summary.get("used")),
        "include_incomplete": bool(options.get("includeIncomplete")),
        "grade": str(grade.get("grade") or "unknown"),
        "reasons": [str(r) for r in grade.get("reasons") or []],
        "rule": grade.get("rule"),
        "software": [(str(name), str(software[name])) for name in sorted(software)],
        "schema_version": audit.get("schemaVersion"),
        "hash": md_code(str(plan.get("hash") or "unknown")),
        "audit_hash": Md(AUDIT_HASH_TEXT + md_code(naming.audit_fingerprint(audit))),
        "llm_calls": _int(cost.get("llmCalls")),
        "prompt_tokens": _int(cost.get("promptTokens")),
        "completion_tokens": _int(cost.get("completionTokens")),
        "conclusions": _conclusions(audit, metrics),
        "decisions": md_escape(verdict.decisions(audit)),
    }


def _conclusions(audit: Mapping[str, Any], metrics: Sequence[str]) -> dict[str, Any] | None:
    """What methods.md says of the conclusions (schema 3): the tests that ran and on how many
    rows, how rows were paired, the family, the margins, the intervals and the achieved grade."""
    family = audit.get("family")
    if not isinstance(family, Mapping):
        return None
    rows = [r for m in metrics for r in (audit.get("tests") or {}).get(m) or []]
    tested = [r for r in rows if r.get("tested")]

    def counted(key: str) -> list[Md]:
        counts: dict[str, int] = {}
        for r in tested:
            if r.get(key):
                counts[str(r[key])] = counts.get(str(r[key]), 0) + 1
        return [Md(f"{md_escape(name)} ({plural(n, 'row')})") for name, n in counts.items()]

    paired = sum(1 for r in tested if r.get("paired"))
    unpaired_reasons = sorted({str(r["pairing"]) for r in tested if not r.get("paired")})
    margins = {m: r.get("margin") for m in metrics for r in (audit.get("tests") or {}).get(m) or []}
    grade: Mapping[str, Any] = audit.get("grade") or {}
    return {
        "tests": counted("test"),
        "intervals": counted("intervalMethod"),
        "equivalence": counted("equivalenceTest"),
        "paired": paired,
        "tested": len(tested),
        "unpaired_reasons": [md_escape(r.removeprefix("unpaired: ")) for r in unpaired_reasons],
        "family_method": md_escape(family.get("method")),
        "primary": [md_code(str(m)) for m in family.get("primaryMetrics") or []],
        "secondary": [md_code(str(m)) for m in family.get("secondaryMetrics") or []],
        "primary_rows": _int(family.get("primaryRows")),
        "alpha": family.get("alpha"),
        "margins": [
            Md(f"±{_number(float(v), 3)} for {md_code(m)}")
            for m, v in margins.items()
            if isinstance(v, (int, float))
        ],
        "achieved": md_escape(grade.get("achieved")) if grade.get("achieved") else None,
        "achieved_reasons": [md_escape(r) for r in grade.get("achievedReasons") or []],
        "headline": md_escape((audit.get("verdict") or {}).get("headline") or ""),
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


def methods_markdown(audit: Mapping[str, Any]) -> str:
    """The methods section of an audit (the dict `analyse` returns, or audit.json read back)."""
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


def _read_audit(audit_dir: Path) -> dict[str, Any]:
    audit_file = audit_dir / "audit.json"
    # Strings in audit.json may carry control characters: every one printed is made visible.
    audit = load_document(audit_file, allow_control_characters=True).data
    if not isinstance(audit, dict) or "plan" not in audit or "schemaVersion" not in audit:
        raise InputError(
            "not an audit document", file=audit_file, expected="audit.json written by analyse"
        )
    return audit


def methods_title(audit: Mapping[str, Any]) -> str:
    plan = audit.get("plan") or {}
    return f"Methods: {plan.get('title') or plan.get('id') or 'untitled audit'}"


def write_methods(audit_dir: str | Path) -> tuple[Path, Path]:
    """Read `audit_dir/audit.json`; write `methods.md` and `methods.html` there (atomically).
    Returns their paths."""
    root = Path(audit_dir)
    audit = _read_audit(root)
    markdown_text = methods_markdown(audit)
    md_path, html_path = root / "methods.md", root / "methods.html"
    write_atomic(md_path, markdown_text)
    write_atomic(html_path, methods_html(markdown_text, methods_title(audit)))
    return md_path, html_path
