"""Render a decision request into chat messages, honouring the scenario's representation choices.

The four representation settings change only how the same content is written: the persona as
prose, bullets or a table; instructions before or after the persona; memory as a transcript, JSON
or bullets; and the role in the system turn or in the user turn.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..core.schema import PromptConfig
from .providers.base import Message
from .world import DecisionRequest

ANSWER_PREFIX = "Answer with exactly one of:"


def _label(key: str) -> str:
    out = []
    for ch in key:
        if ch.isupper():
            out.append(" ")
            out.append(ch.lower())
        elif ch == "_":
            out.append(" ")
        else:
            out.append(ch)
    return "".join(out).strip()


def render_persona(persona: Mapping[str, Any], fmt: str) -> str:
    if not persona:
        return "You are a participant in this situation."
    items = [(_label(k), _value(v)) for k, v in persona.items()]
    if fmt == "bullets":
        return "About you:\n" + "\n".join(f"- {k}: {v}" for k, v in items)
    if fmt == "table":
        rows = "\n".join(f"| {k} | {v} |" for k, v in items)
        return "About you:\n| attribute | value |\n| --- | --- |\n" + rows
    return "You are a person whose " + "; whose ".join(f"{k} is {v}" for k, v in items) + "."


def _value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.2f}".rstrip("0").rstrip(".")
    return str(v)


def render_memory(memory: Sequence[Mapping[str, Any]], fmt: str) -> str:
    if not memory:
        return "You remember nothing yet."
    # The structured forms carry the record's fields; `text` is the transcript's wording of them.
    fields = [{k: v for k, v in record.items() if k != "text"} for record in memory]
    if fmt == "json":
        return "Memory (JSON):\n" + json.dumps(fields, separators=(",", ":"))
    if fmt == "bullets":
        lines = [
            "- " + ", ".join(f"{_label(k)}: {_value(v)}" for k, v in fields_.items())
            for fields_ in fields
        ]
        return "Memory:\n" + "\n".join(lines)
    transcript = []
    for entry in memory:
        text = entry.get("text")
        if isinstance(text, str):
            transcript.append(text)
        else:
            transcript.append(" ".join(f"{_label(k)} {_value(v)}." for k, v in entry.items()))
    return "What happened so far:\n" + "\n".join(transcript)


def render(
    request: DecisionRequest,
    persona: Mapping[str, Any],
    prompt: PromptConfig,
    components: Sequence[str],
) -> tuple[Message, ...]:
    """The messages for one decision."""
    persona_block = render_persona(persona, prompt.persona_format)
    role_blocks: list[str] = []
    if "instructions" in components:
        instructions = request.instructions
        if prompt.instruction_order == "instructions_first":
            role_blocks = [instructions, persona_block]
        else:
            role_blocks = [persona_block, instructions]
    else:
        role_blocks = [persona_block]
    if "goals" in components and request.goals:
        role_blocks.append("Your goal: " + request.goals)

    context_blocks: list[str] = []
    if "memory" in components:
        context_blocks.append(render_memory(request.memory, prompt.memory_representation))
    context_blocks.append(request.situation)
    context_blocks.append(f"{ANSWER_PREFIX} {', '.join(request.options)}.")

    if prompt.role_placement == "system":
        return (
            Message("system", "\n\n".join(role_blocks)),
            Message("user", "\n\n".join(context_blocks)),
        )
    return (Message("user", "\n\n".join(role_blocks + context_blocks)),)


def parse_answer(text: str, options: Sequence[str]) -> str | None:
    """The option a model's answer names, or None when it names none or several.

    Accepts the bare option, quoted, with trailing punctuation, or inside a short sentence, and a
    JSON object {"answer": ...}; matching ignores case.
    """
    candidate = text.strip()
    if candidate.startswith("{"):
        try:
            value = json.loads(candidate)
        except ValueError:
            value = None
        if isinstance(value, dict):
            for key in ("answer", "choice", "option", "action"):
                if isinstance(value.get(key), str):
                    candidate = value[key]
                    break
    cleaned = _bare(candidate)
    # An option is matched as the answer is: without its own closing punctuation.
    lowered = {_bare(o): o for o in options}
    if cleaned in lowered:
        return lowered[cleaned]
    # Longest options first, so "lean support" is not read as "support".
    found: list[str] = []
    haystack = f" {cleaned} "
    for needle, option in sorted(lowered.items(), key=lambda item: len(item[0]), reverse=True):
        pos = haystack.find(needle)
        if (
            pos >= 0
            and not haystack[pos - 1].isalnum()
            and not haystack[pos + len(needle)].isalnum()
        ):
            found.append(option)
            haystack = haystack.replace(needle, " ")
    return found[0] if len(found) == 1 else None


def _bare(text: str) -> str:
    """Text as answers are compared: trimmed, lower case, without quotes or closing marks."""
    return text.strip().strip("\"'`.!*").strip().lower()
