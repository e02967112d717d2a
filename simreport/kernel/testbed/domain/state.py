"""The facts of one run of a domain: its entities, changed only by the tools' declared effects.

A call checks its arguments against the tool's input schema, then its preconditions in order;
when all hold, every effect is computed from the state before the call and then applied, each
changed instance is checked against its entity's schema, and the answer is computed from the
state after. Invariants say what must hold at rest (a recovery is verified against them).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import jsonschema

from ....core.canonical import content_hash
from ..environment.facts import Change
from .expressions import ExpressionError
from .model import DomainAsset, DomainTool


class DomainFault(ExpressionError):
    """The domain's own rules broke (an effect made an instance its schema refuses, an answer
    that is not a map): a fault of the domain asset, not of the agent under test."""

    def __init__(self, message: str, *, path: str, kind: str = "domain_fault") -> None:
        super().__init__(message, path=path, kind=kind)


class DomainState:
    """The entities of one run (a private copy: runs share no mutable state)."""

    def __init__(self, domain: DomainAsset) -> None:
        self.domain = domain
        self.state: dict[str, dict[str, dict[str, Any]]] = {
            name: {str(item[kind.key]): copy.deepcopy(item) for item in kind.initial}
            for name, kind in domain.entities.items()
        }
        self.initial = copy.deepcopy(self.state)
        self.serial = {name: len(kind.initial) for name, kind in domain.entities.items()}
        self._validators = {
            name: jsonschema.Draft202012Validator(kind.schema_)
            for name, kind in domain.entities.items()
        }
        self._inputs = {
            tool.name: jsonschema.Draft202012Validator(tool.input) for tool in domain.tools
        }
        self._outputs = {
            tool.name: jsonschema.Draft202012Validator(tool.output)
            for tool in domain.tools
            if tool.output is not None
        }
        self._initial_problems: frozenset[str] = frozenset()
        # A recovery answers for what a fault left, not for what the data held from the start.
        self._initial_problems = frozenset(self.invariant_problems())

    # -- the tools

    def argument_problem(self, tool: DomainTool, arguments: Mapping[str, Any]) -> str | None:
        """Why the arguments do not fit the tool's input schema, or None."""
        error = jsonschema.exceptions.best_match(self._inputs[tool.name].iter_errors(arguments))
        if error is None:
            return None
        where = ".".join(str(p) for p in error.absolute_path)
        return f"{where + ': ' if where else ''}{error.message}"

    def call(
        self, tool: DomainTool, arguments: Mapping[str, Any], now: str
    ) -> tuple[dict[str, Any], list[Change]]:
        """Answer one call: preconditions, effects, answer. The answer always carries `ok`."""
        index = self.domain.tool_index(tool.name)
        base = f"tools.{index}"
        args = dict(arguments)
        before = {"args": args, "state": self.state, "items": self.items(), "now": now}
        for j, pre in enumerate(tool.preconditions):
            if not self.domain.expression(f"{base}.preconditions.{j}.require").truth(before):
                return {"ok": False, "error": pre.error, "message": pre.message or pre.error}, []
        changes = self._apply(tool, base, args, now)
        created = [c.after for c in changes if c.before is None]
        answer = self.domain.expression(f"{base}.answer").evaluate(
            {
                "args": args,
                "state": self.state,
                "items": self.items(),
                "now": now,
                "created": created,
            }
        )
        if not isinstance(answer, dict):
            raise DomainFault(
                f"the answer of {tool.name} is {type(answer).__name__}, expected a map",
                path=f"{base}.answer",
            )
        body = {"ok": True, **answer}
        validator = self._outputs.get(tool.name)
        if validator is not None:
            error = jsonschema.exceptions.best_match(validator.iter_errors(body))
            if error is not None:
                raise DomainFault(
                    f"the answer of {tool.name} does not fit its output schema: {error.message}",
                    path=f"{base}.output",
                )
        return body, changes

    def _apply(self, tool: DomainTool, base: str, args: dict[str, Any], now: str) -> list[Change]:
        # Every effect reads the state before the call; then all are applied together.
        nexts = dict(self.serial)
        for effect in tool.effects:
            if effect.create is not None:
                nexts[effect.create] += 1
        variables = {
            "args": args,
            "state": self.state,
            "items": self.items(),
            "now": now,
            "next": nexts,
        }
        # (entity, key, the instance before (None: created), the new instance or updated fields)
        planned: list[tuple[str, str, dict[str, Any] | None, dict[str, Any]]] = []
        for j, effect in enumerate(tool.effects):
            path = f"{base}.effects.{j}"
            kind = self.domain.entities[effect.entity]
            if effect.create is not None:
                value = self.domain.expression(f"{path}.value").evaluate(variables)
                if not isinstance(value, dict) or kind.key not in value:
                    raise DomainFault(
                        f"creates {value!r}, expected a map with its key {kind.key!r}",
                        path=f"{path}.value",
                    )
                planned.append((effect.create, str(value[kind.key]), None, value))
            else:
                ident = str(self.domain.expression(f"{path}.id").evaluate(variables))
                current = self.state[effect.entity].get(ident)
                if current is None:
                    raise DomainFault(
                        f"updates {effect.entity} {ident!r}, which does not exist (guard it with "
                        "a precondition)",
                        path=f"{path}.id",
                    )
                updated = {
                    name: self.domain.expression(f"{path}.set.{name}").evaluate(variables)
                    for name in effect.set
                }
                planned.append((effect.entity, ident, current, updated))
        # Effects on one instance merge (each set from the state before the call); nothing is
        # applied until every changed instance fits its schema, so a refused call changes nothing.
        final: dict[tuple[str, str], tuple[dict[str, Any] | None, dict[str, Any]]] = {}
        for entity, ident, old, new in planned:
            if old is None:
                if ident in self.state[entity] or (entity, ident) in final:
                    raise DomainFault(f"creates {entity} {ident!r}, which exists", path=base)
                final[(entity, ident)] = (None, new)
            else:
                merged = final.get((entity, ident), (old, old))[1]
                final[(entity, ident)] = (old, {**merged, **new})
        for (entity, ident), (_, new) in final.items():
            error = jsonschema.exceptions.best_match(self._validators[entity].iter_errors(new))
            if error is not None:
                raise DomainFault(
                    f"leaves {entity} {ident!r} outside its schema: {error.message}", path=base
                )
        changes: list[Change] = []
        for (entity, ident), (old, new) in final.items():
            if old is None:
                self.serial[entity] += 1
                changes.append(Change(entity, ident, None, copy.deepcopy(new)))
            else:
                diff = sorted(k for k in new if old.get(k) != new[k])
                if not diff:
                    continue
                changes.append(
                    Change(
                        entity,
                        ident,
                        {k: old.get(k) for k in diff},
                        {k: copy.deepcopy(new[k]) for k in diff},
                    )
                )
            self.state[entity][ident] = copy.deepcopy(new)
        return changes

    # -- at rest

    def invariant_problems(self) -> list[str]:
        """The invariants that do not hold, beyond those that did not hold at the start."""
        variables = {"state": self.state, "items": self.items(), "initial": self.initial}
        problems: list[str] = []
        for i, invariant in enumerate(self.domain.invariants):
            try:
                holds = self.domain.expression(f"invariants.{i}.holds").truth(variables)
            except ExpressionError as exc:
                problems.append(f"invariant {invariant.name} cannot be read: {exc.message}")
                continue
            if not holds:
                problems.append(f"invariant {invariant.name} does not hold")
        return [p for p in problems if p not in self._initial_problems]

    def adopt(self, entities: Mapping[str, list[dict[str, Any]]]) -> None:
        """Take the instances a real backend reports for its entities (of the domain's, keyed
        by their key field) in place of this state's own."""
        for name, found in entities.items():
            kind = self.domain.entities.get(name)
            if kind is None:
                continue
            self.state[name] = {
                str(item[kind.key]): copy.deepcopy(item) for item in found if kind.key in item
            }

    def items(self) -> dict[str, list[dict[str, Any]]]:
        """Entity → its instances in key order (what expressions iterate)."""
        return {name: [found[k] for k in sorted(found)] for name, found in self.state.items()}

    def snapshot(self) -> dict[str, Any]:
        """Every instance, by entity and key, in key order (and each instance's fields too)."""
        return {
            name: [_sorted(items[k]) for k in sorted(items)]
            for name, items in sorted(self.state.items())
        }

    def digest(self) -> str:
        return content_hash(self.snapshot())


def _sorted(value: Any) -> Any:
    """A deep copy with every map's keys in sorted order."""
    if isinstance(value, Mapping):
        return {str(k): _sorted(value[k]) for k in sorted(value, key=str)}
    if isinstance(value, list):
        return [_sorted(v) for v in value]
    return copy.deepcopy(value)
