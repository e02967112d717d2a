"""The worlds' catalogue: what each world takes and reports, read from its declarations (`simreport
worlds` prints it).

For every registered world: its parameters (name, type, default, allowed values, description),
its metrics and distributions, and the TRAILS templates whose default target exists in a scenario
of that world; then what an external simulator takes and reports.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from .core.errors import InputError, UnknownOverride
from .core.overrides import get_path
from .core.schema import Scenario, WorldParams

if TYPE_CHECKING:
    from .kernel.world import World

Row = dict[str, Any]


# --------------------------------------------------------------------------- the catalogue


def world_catalog(name: str | None = None) -> Row:
    """The catalogue as a JSON-ready document: `worlds` (every registered world) and
    `externalSimulator`; or, given a world's name, that world alone."""
    from .kernel.worlds import WORLDS

    if name is not None:
        if name not in WORLDS:
            raise InputError(
                f"unknown world {name!r}", path="world", expected="one of " + ", ".join(WORLDS)
            )
        return {"worlds": [world_entry(WORLDS.get(name))]}
    return {
        "worlds": [world_entry(WORLDS.get(n)) for n in WORLDS],
        "externalSimulator": simulator_entry(),
    }


def world_entry(world: type[World]) -> Row:
    """One world's parameters, metrics, distributions and applicable templates."""
    base = Scenario.model_validate({"world": world.name}).to_doc()
    base["params"] = _defaults(world.Params)
    return {
        "name": world.name,
        "description": _first_line(world.__doc__),
        "parametersNote": _first_line(world.Params.__doc__),
        "parameters": parameter_rows(world.Params),
        "metrics": [{"name": k, "description": v} for k, v in world.metrics.items()],
        "distributions": [{"name": k, "description": v} for k, v in world.distributions.items()],
        "templates": template_rows(base, pinned=world.pinned),
    }


def simulator_entry() -> Row:
    """What an external simulator takes and reports (its outputs are declared per scenario)."""
    from .kernel.external import DECLARED_OUTPUTS

    base = Scenario.model_validate({"simulator": {"command": ["simulator"]}}).to_doc()
    return {
        "description": (
            "A command run instead of a built-in world: it gets --config, --seed and --out and "
            "writes result.json."
        ),
        "parametersNote": "`params` is passed to the command as given, unchecked.",
        "metricsDeclaredAt": DECLARED_OUTPUTS["metrics"],
        "distributionsDeclaredAt": DECLARED_OUTPUTS["distributions"],
        "templates": template_rows(base, pinned=()),
    }


def parameter_rows(params: type[WorldParams]) -> list[Row]:
    """Every parameter, nested keys as dotted names after their parent, read from the JSON Schema
    an editor sees."""
    schema = params.model_json_schema(by_alias=True)
    return list(_rows(schema, schema.get("$defs", {}), _defaults(params), prefix=""))


def template_rows(base: Mapping[str, Any], *, pinned: tuple[str, ...]) -> list[Row]:
    """The TRAILS templates whose default target exists in the scenario `base` (a policy option
    counts when a registered policy declares it, named in `when`), in catalogue order."""
    from .harness.axes import AXIS_CATALOG

    rows = []
    for template in AXIS_CATALOG.values():
        if any(template.target == p or template.target.startswith(p + ".") for p in pinned):
            continue
        when = _where_target_exists(base, template.target)
        if when is None:
            continue
        rows.append(
            {
                "code": template.code,
                "id": template.id,
                "target": template.target,
                "when": when or None,
                "description": template.description,
            }
        )
    return rows


def _where_target_exists(base: Mapping[str, Any], target: str) -> str | None:
    """'' when `target` exists in `base`; the policy it needs when it exists under another
    activation policy; None when it does not exist."""
    from .kernel.policies import POLICIES

    if _exists(base, target):
        return ""
    if not target.startswith("policy.options."):
        return None
    for name in POLICIES:
        doc = copy.deepcopy(dict(base))
        doc["policy"] = {"name": name, "options": POLICIES.get(name).Options().to_doc()}
        if _exists(doc, target):
            return f"policy.name: {name}"
    return None


def _exists(document: Mapping[str, Any], path: str) -> bool:
    try:
        get_path(document, path)
    except UnknownOverride:
        return False
    return True


def _defaults(params: type[WorldParams]) -> dict[str, Any]:
    """The parameters' document with every default filled in ({} when some are required)."""
    try:
        return params.model_validate({}).to_doc()
    except ValueError:
        return {}


def _first_line(doc: str | None) -> str:
    return " ".join((doc or "").strip().split("\n\n")[0].split())


# --------------------------------------------------------------------------- JSON Schema → rows


def _rows(
    schema: Mapping[str, Any], defs: Mapping[str, Any], defaults: Any, *, prefix: str
) -> Iterator[Row]:
    required = set(schema.get("required", ()))
    for key, prop in schema.get("properties", {}).items():
        name = prefix + key
        has_default = isinstance(defaults, Mapping) and key in defaults
        default = defaults.get(key) if isinstance(defaults, Mapping) else None
        if not has_default and "default" in prop:
            has_default, default = True, prop["default"]
        kind, allowed, nested = _describe(prop, defs)
        yield {
            "name": name,
            "type": kind,
            "required": key in required,
            "default": default if has_default else None,
            "allowed": allowed,
            "description": prop.get("description") or (nested or {}).get("description", ""),
        }
        if nested is not None:
            yield from _rows(
                nested, defs, default if default is not None else {}, prefix=name + "."
            )


def _describe(
    prop: Mapping[str, Any], defs: Mapping[str, Any]
) -> tuple[str, str | None, Mapping[str, Any] | None]:
    """(type, allowed values, nested object schema) of one property."""
    if "$ref" in prop:
        target = defs[prop["$ref"].rsplit("/", 1)[-1]]
        return "mapping", None, target
    if "anyOf" in prop:
        members = [m for m in prop["anyOf"] if m.get("type") != "null"]
        nullable = len(members) < len(prop["anyOf"])
        parts = [_describe(m, defs) for m in members]
        kind = " or ".join(p[0] for p in parts) + (" or null" if nullable else "")
        allowed = "; ".join(p[1] for p in parts if p[1]) or None
        nested = next((p[2] for p in parts if p[2] is not None), None)
        return kind, allowed, nested
    if "enum" in prop:
        return prop.get("type", "string"), " | ".join(str(v) for v in prop["enum"]), None
    if "const" in prop:
        return prop.get("type", "string"), str(prop["const"]), None
    kind = prop.get("type", "any")
    if kind == "array":
        item, item_allowed, _ = _describe(prop.get("items", {}), defs)
        return f"list of {item}", item_allowed, None
    if kind == "object":
        return "mapping", None, None
    return kind, _bounds(prop), None


def _bounds(prop: Mapping[str, Any]) -> str | None:
    low = next(((op, prop[k]) for k, op in _LOWER if k in prop), None)
    high = next(((op, prop[k]) for k, op in _UPPER if k in prop), None)
    if low and high:
        return f"{_num(low[1])} {low[0]} x {high[0]} {_num(high[1])}"
    if low:
        return f"{_MIRROR[low[0]]} {_num(low[1])}"
    if high:
        return f"{high[0]} {_num(high[1])}"
    if "minLength" in prop:
        return f"at least {prop['minLength']} character{'s' if prop['minLength'] != 1 else ''}"
    return None


_LOWER = (("minimum", "≤"), ("exclusiveMinimum", "<"))
_UPPER = (("maximum", "≤"), ("exclusiveMaximum", "<"))
_MIRROR = {"≤": "≥", "<": ">"}


def _num(value: float) -> str:
    return f"{value:g}"


# --------------------------------------------------------------------------- text


def format_catalog(catalog: Mapping[str, Any]) -> str:
    """The catalogue as readable tables."""
    out: list[str] = []
    for world in catalog["worlds"]:
        out.append(f"{world['name']} — {world['description']}")
        out.append("")
        out.append("  parameters")
        if world["parameters"]:
            out.extend(
                _table(
                    ["name", "type", "default", "allowed", "description"],
                    [
                        [
                            p["name"],
                            p["type"],
                            "(required)" if p["required"] else _value(p["default"]),
                            p["allowed"] or "",
                            p["description"],
                        ]
                        for p in world["parameters"]
                    ],
                )
            )
        else:
            out.append(f"    none: {world['parametersNote']}")
        for title, key in (("metrics", "metrics"), ("distributions", "distributions")):
            if world[key]:
                out.append(f"  {title}")
                out.extend(_table(None, [[m["name"], m["description"]] for m in world[key]]))
        out.extend(_templates(world["templates"]))
        out.append("")
    sim = catalog.get("externalSimulator")
    if sim is not None:
        out.append(f"external simulator (`simulator` instead of `world`) — {sim['description']}")
        out.append("")
        out.append(f"  parameters: {sim['parametersNote']}")
        out.append(
            f"  metrics and distributions: the names in {sim['metricsDeclaredAt']} and "
            f"{sim['distributionsDeclaredAt']}; a completed result without a declared metric is "
            "a failed run"
        )
        out.extend(_templates(sim["templates"]))
        out.append("")
    out.append(
        "A template whose default target is not listed still applies with an explicit `target`."
    )
    return "\n".join(out)


def _templates(rows: list[Row]) -> list[str]:
    lines = ["  TRAILS templates (default target)"]
    lines.extend(
        _table(
            None,
            [
                [t["code"], t["id"], t["target"] + (f"  (with {t['when']})" if t["when"] else "")]
                for t in rows
            ],
        )
    )
    return lines


def _table(header: list[str] | None, rows: list[list[str]]) -> list[str]:
    body = [header, *rows] if header else rows
    if not body:
        return []
    widths = [max(len(r[i]) for r in body) for i in range(len(body[0]) - 1)]
    return [
        "    " + "  ".join(c.ljust(w) for c, w in zip(r[:-1], widths, strict=False)) + "  " + r[-1]
        for r in body
    ]


def _value(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
