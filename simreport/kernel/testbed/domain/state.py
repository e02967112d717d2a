"""The facts of one run of a domain: its entities, changed only by the tools' declared effects.

A call checks its arguments against the tool's input schema, then its preconditions in order;
when all hold, it is received (`receive` effects) and processed (`effects`): each phase's effects
are computed from the state before it, then applied, and each changed instance is checked against
its entity's schema. The answer is read from the state after. Invariants say what must hold at
rest (a recovery is verified against them).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import jsonschema

from ....core.canonical import content_hash
from ..environment.gateway import Change
from .expressions import ExpressionError
from .model import DomainAsset, DomainTool, Effect


def _whole_integer(_checker: Any, value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# Arguments are checked as the agent sent them: JSON Schema counts 2.0 as an integer, but an
# expression adding it to an integer fails, so an argument that is not written as a whole number
# is refused as an argument, never met later as a fault of the domain.
_extend: Any = jsonschema.validators.extend  # untyped in the library
_ArgumentValidator = _extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _whole_integer),
)


def _argument_message(error: jsonschema.ValidationError) -> str:
    """What the agent is told of an argument error, naming the argument."""
    path = [str(p) for p in error.absolute_path]
    instance = error.instance if isinstance(error.instance, Mapping) else {}
    if error.validator == "required":
        required: Any = error.validator_value
        name = next(str(k) for k in required if k not in instance)
        return f"missing required argument {'.'.join([*path, name])!r}"
    if error.validator == "additionalProperties":
        known = (
            set((error.schema or {}).get("properties") or {})
            if isinstance(error.schema, Mapping)
            else set()
        )
        extra = sorted(str(k) for k in instance if k not in known)
        if extra:
            return f"unknown argument {'.'.join([*path, extra[0]])!r}"
    where = ".".join(path)
    if where and error.validator == "type":
        expected = error.validator_value
        kinds = " or ".join(expected) if isinstance(expected, list) else str(expected)
        return f"argument {where!r} must be a {kinds}"
    if where and error.validator == "pattern":
        return f"argument {where!r} does not match {error.validator_value}"
    return f"{where + ': ' if where else ''}{error.message}"


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
        self._inputs = {tool.name: _ArgumentValidator(tool.input) for tool in domain.tools}
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
        """Why the arguments do not fit the tool's input schema, or None: a missing argument
        first (in the order the schema requires them), then the most relevant other error."""
        errors = list(self._inputs[tool.name].iter_errors(arguments))
        if not errors:
            return None
        missing = [e for e in errors if e.validator == "required"]
        return _argument_message(
            missing[0] if missing else jsonschema.exceptions.best_match(errors)
        )

    def call(
        self, tool: DomainTool, arguments: Mapping[str, Any], now: str
    ) -> tuple[dict[str, Any], list[Change]]:
        """Answer one call: preconditions, then what receiving it records, then what processing
        it changes, then the answer. The answer always carries `ok`."""
        refused, changes, received = self.receive(tool, arguments, now)
        if refused is not None:
            return refused, []
        changes += self.process(tool, arguments, received, now)
        base = f"tools.{self.domain.tool_index(tool.name)}"
        expression = self.domain.expression(f"{base}.answer")
        variables: dict[str, Any] = {
            "args": dict(arguments),
            "state": self.state,
            "items": self.items(),
            "now": now,
            "created": [c.after for c in changes if c.before is None],
        }
        if "changed" in expression.variables:
            touched = {(c.entity, c.id) for c in changes}
            variables["changed"] = {
                name: [found[k] for k in sorted(found) if (name, k) in touched]
                for name, found in self.state.items()
            }
        answer = expression.evaluate(variables)
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

    def receive(
        self, tool: DomainTool, arguments: Mapping[str, Any], now: str
    ) -> tuple[dict[str, Any] | None, list[Change], list[dict[str, Any]]]:
        """Receive a call: its preconditions, then its `receive` effects. Returns the refusal
        (None when every precondition held), the changes, and the instances received (each as
        it stands after the receipt), which `process` reads as `received`."""
        base = f"tools.{self.domain.tool_index(tool.name)}"
        args = dict(arguments)
        before = {"args": args, "state": self.state, "items": self.items(), "now": now}
        for j, pre in enumerate(tool.preconditions):
            path = f"{base}.preconditions.{j}"
            if not self.domain.expression(f"{path}.require").truth(before):
                message = pre.message or pre.error
                if pre.explain is not None:
                    message = str(self.domain.expression(f"{path}.explain").evaluate(before))
                return {"ok": False, "error": pre.error, "message": message}, [], []
        changes = self._apply(tool.receive, f"{base}.receive", args, now, [])
        received = [
            copy.deepcopy(self.state[c.entity][c.id])
            for c in changes
            if c.id in self.state[c.entity]
        ]
        return None, changes, received

    def process(
        self,
        tool: DomainTool,
        arguments: Mapping[str, Any],
        received: list[dict[str, Any]],
        now: str,
    ) -> list[Change]:
        """Process a received call: its `effects`, which read what was received."""
        base = f"tools.{self.domain.tool_index(tool.name)}"
        return self._apply(tool.effects, f"{base}.effects", dict(arguments), now, received)

    def _apply(
        self,
        effects: list[Effect],
        base: str,
        args: dict[str, Any],
        now: str,
        received: list[dict[str, Any]],
    ) -> list[Change]:
        if not effects:
            return []
        # Every effect of the phase reads the state before it; then all are applied.
        nexts = dict(self.serial)
        for effect in effects:
            if effect.create is not None:
                nexts[effect.create] += 1
        variables = {
            "args": args,
            "state": self.state,
            "items": self.items(),
            "now": now,
            "next": nexts,
            "initial": self.initial,
            "received": received,
        }
        # (entity, key, the instance before (None: created), the new instance or updated fields)
        planned: list[tuple[str, str, dict[str, Any] | None, dict[str, Any]]] = []
        for j, effect in enumerate(effects):
            path = f"{base}.{j}"
            if effect.when is not None and not self.domain.expression(f"{path}.when").truth(
                variables
            ):
                continue
            kind = self.domain.entities[effect.entity]
            if effect.create is not None:
                value = self.domain.expression(f"{path}.value").evaluate(variables)
                if not isinstance(value, dict) or kind.key not in value:
                    raise DomainFault(
                        f"creates {value!r}, expected a map with its key {kind.key!r}",
                        path=f"{path}.value",
                    )
                planned.append((effect.create, str(value[kind.key]), None, value))
                continue
            found = self.domain.expression(f"{path}.id").evaluate(variables)
            for ident in map(str, found if isinstance(found, list) else [found]):
                current = self.state[effect.entity].get(ident)
                if current is None:
                    raise DomainFault(
                        f"updates {effect.entity} {ident!r}, which does not exist (guard it "
                        "with a precondition)",
                        path=f"{path}.id",
                    )
                this = {**variables, "this": current}
                updated = {
                    name: self.domain.expression(f"{path}.set.{name}").evaluate(this)
                    for name in effect.set
                }
                planned.append((effect.entity, ident, current, updated))
        # Effects on one instance merge (each set from the state before the phase); nothing is
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

    def invariant_problems(self, pending: Mapping[str, list[str]] | None = None) -> list[str]:
        """The invariants that do not hold, beyond those that did not hold at the start.
        `pending`: entity → the keys of instances received by calls still held."""
        waiting = {name: sorted((pending or {}).get(name, [])) for name in self.state}
        items = self.items()
        variables = {
            "state": self.state,
            "items": items,
            "initial": self.initial,
            "pending": waiting,
        }
        problems: list[str] = []
        for i, invariant in enumerate(self.domain.invariants):
            expression = self.domain.expression(f"invariants.{i}.holds")
            try:
                if invariant.each is None:
                    if not expression.truth(variables):
                        problems.append(f"invariant {invariant.name} does not hold")
                    continue
                kind = self.domain.entities[invariant.each]
                failing = [
                    str(item[kind.key])
                    for item in items[invariant.each]
                    if not expression.truth({**variables, "this": item})
                ]
            except ExpressionError as exc:
                problems.append(f"invariant {invariant.name} cannot be read: {exc.message}")
                continue
            # One problem per instance, so what was already broken at the start stays apart.
            problems += [
                f"invariant {invariant.name} does not hold for {invariant.each} {key}"
                for key in failing
            ]
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
