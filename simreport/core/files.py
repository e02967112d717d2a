"""File I/O at the edges: reading YAML/JSON documents with line numbers, atomic writes."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .canonical import pretty_json
from .errors import DocumentError


@dataclass
class Document:
    """A parsed YAML/JSON document and, for YAML, the line of each dotted path."""

    path: Path
    data: Any
    lines: dict[str, int] = field(default_factory=dict)

    def line_of(self, dotted: str | None) -> int | None:
        """The line of `dotted`, or of its nearest ancestor that has one."""
        if dotted is None:
            return None
        parts = dotted.split(".") if dotted else []
        while parts:
            key = ".".join(parts)
            if key in self.lines:
                return self.lines[key]
            parts.pop()
        return self.lines.get("")


def _node_lines(node: yaml.Node, prefix: str, out: dict[str, int]) -> None:
    out.setdefault(prefix, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = str(key_node.value)
            child = f"{prefix}.{key}" if prefix else key
            out[child] = key_node.start_mark.line + 1
            _node_lines(value_node, child, out)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            child = f"{prefix}.{index}" if prefix else str(index)
            out[child] = item.start_mark.line + 1
            _node_lines(item, child, out)


def load_document(path: str | Path) -> Document:
    """Read a YAML or JSON file. Raises DocumentError naming the file (and line) on failure."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DocumentError("file not found", file=p, expected="an existing file") from None
    except IsADirectoryError:
        raise DocumentError("is a directory", file=p, expected="a YAML or JSON file") from None
    except UnicodeDecodeError:
        raise DocumentError("not UTF-8 text", file=p, expected="a YAML or JSON file") from None
    except OSError as exc:
        raise DocumentError(f"cannot read: {exc.strerror}", file=p) from None
    return parse_document(text, p)


def parse_document(text: str, path: Path) -> Document:
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DocumentError(
                f"JSON syntax error: {exc.msg} at column {exc.colno}",
                file=path,
                line=exc.lineno,
                expected="valid JSON",
            ) from None
        return Document(path, data)
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = exc.problem or exc.context or "syntax error"
        raise DocumentError(
            f"YAML syntax error: {problem}", file=path, line=line, expected="valid YAML"
        ) from None
    except yaml.YAMLError as exc:
        raise DocumentError(f"YAML error: {exc}", file=path, expected="valid YAML") from None
    lines: dict[str, int] = {}
    if node is not None:
        _node_lines(node, "", lines)
    return Document(path, data, lines)


def write_atomic(path: str | Path, data: str | bytes, *, durable: bool = True) -> None:
    """Write a file so that readers see either the old content or the whole new content.

    The temporary file sits in the same directory so the final rename stays on one filesystem.
    `durable` also flushes it to disk before the rename (a cache whose entries can be fetched
    again may skip that).
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        # mkstemp creates 0600; results and pages are meant to be read by others (web servers).
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_json(path: str | Path, value: Any) -> None:
    """Atomically write `value` as sorted, indented, strict JSON."""
    write_atomic(path, pretty_json(value))


def read_json(path: str | Path) -> Any:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)
