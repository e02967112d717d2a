"""File I/O at the edges: reading YAML/JSON documents with line numbers, atomic writes.

Documents come from users, so reading one is bounded: YAML aliases may add at most
`ALIAS_EXPANSION_LIMIT` nodes, a key appears once per mapping, and strings carry no control
characters (unless the caller renders them itself, escaping them).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .canonical import pretty_json
from .errors import DocumentError, DuplicateKey, InputError, join_path

ALIAS_EXPANSION_LIMIT = 100_000
"""How many nodes YAML aliases may add to a document beyond those written out, each use of an
alias counting its whole subtree. A few lines of nested aliases can otherwise stand for billions
of nodes; real plans, scenarios and assets stay under a thousand even with shared defaults."""

CONTROL_CHARACTERS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
"""C0 controls other than tab, newline and carriage return; DEL; the C1 controls."""

_NO_CONTROLS = "text without control characters other than tab, newline and carriage return"
_MERGE_TAG = "tag:yaml.org,2002:merge"


def visible_control_characters(text: str) -> str:
    """`text` with each control character replaced by a visible stand-in: its Unicode control
    picture (U+2400–U+2421) for C0 and DEL, the replacement character for C1. Pages use it so
    that no control byte from a plan reaches a reader's terminal or browser raw."""
    return CONTROL_CHARACTERS.sub(_control_picture, text)


def _control_picture(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x20:
        return chr(0x2400 + code)
    return "\u2421" if code == 0x7F else "\ufffd"


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


def load_document(path: str | Path, *, allow_control_characters: bool = False) -> Document:
    """Read a YAML or JSON file. Raises DocumentError naming the file (and line) on failure.

    `allow_control_characters` is for documents whose strings are escaped wherever they are
    shown (audit.json, read by the pages); user input keeps the default and refuses them."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DocumentError(
            "file not found", kind="file_missing", file=p, expected="an existing file"
        ) from None
    except IsADirectoryError:
        raise DocumentError(
            "is a directory", kind="directory", file=p, expected="a YAML or JSON file"
        ) from None
    except UnicodeDecodeError:
        raise DocumentError(
            "not UTF-8 text", kind="not_utf8", file=p, expected="a YAML or JSON file"
        ) from None
    except OSError as exc:
        raise DocumentError(f"cannot read: {exc.strerror}", kind="unreadable", file=p) from None
    return parse_document(text, p, allow_control_characters=allow_control_characters)


def check_config_file(path: str | Path) -> None:
    """Read a workflow config through this loader before Snakemake reads it with its own, which
    follows aliases without bound and keeps the last of duplicate keys."""
    load_document(path)


def parse_document(text: str, path: Path, *, allow_control_characters: bool = False) -> Document:
    """Parse the text of `path` as JSON (by its suffix) or YAML; see `load_document`."""
    try:
        if path.suffix.lower() == ".json":
            return _parse_json(text, path, allow_control_characters)
        return _parse_yaml(text, path, allow_control_characters)
    except RecursionError:
        raise DocumentError(
            "nested too deeply",
            kind="too_deep",
            file=path,
            expected="at most a few hundred levels of nesting",
        ) from None


def _refuse_controls(text: str, file: Path, dotted: str, line: int | None = None) -> None:
    found = CONTROL_CHARACTERS.search(text)
    if found is not None:
        raise DocumentError(
            f"control character U+{ord(found.group()):04X} in a string",
            kind="control_character",
            file=file,
            path=visible_control_characters(dotted) or None,
            line=line,
            expected=_NO_CONTROLS,
        )


# --------------------------------------------------------------------------- JSON


def _parse_json(text: str, path: Path, allow_controls: bool) -> Document:
    duplicated: list[tuple[dict[str, Any], str]] = []

    def keep_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        obj: dict[str, Any] = {}
        for key, value in pairs:
            if key in obj:
                duplicated.append((obj, key))
            obj[key] = value
        return obj

    try:
        data = json.loads(text, object_pairs_hook=keep_duplicates)
    except json.JSONDecodeError as exc:
        raise DocumentError(
            f"JSON syntax error: {exc.msg} at column {exc.colno}",
            kind="json_syntax",
            file=path,
            line=exc.lineno,
            expected="valid JSON",
        ) from None
    if duplicated or not allow_controls:
        twice = {id(obj): key for obj, key in reversed(duplicated)}
        for dotted, value in json_values(data):
            if isinstance(value, dict) and id(value) in twice:
                # json has no positions to give; the path finds the object all the same.
                raise DuplicateKey(
                    f"duplicate key {twice[id(value)]!r}",
                    key=twice[id(value)],
                    first_line=None,
                    file=path,
                    path=join_path(dotted, twice[id(value)]) or None,
                    expected="each key once in an object",
                )
            if allow_controls:
                continue
            if isinstance(value, str):
                _refuse_controls(value, path, dotted)
            elif isinstance(value, dict):
                for key in value:
                    _refuse_controls(key, path, join_path(dotted, key))
    return Document(path, data)


def json_values(data: Any) -> Iterator[tuple[str, Any]]:
    """Every value of a JSON document with its dotted path, in document order."""
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        dotted, value = stack.pop()
        yield dotted, value
        if isinstance(value, dict):
            items = [(join_path(dotted, k), v) for k, v in value.items()]
        elif isinstance(value, list):
            items = [(join_path(dotted, i), v) for i, v in enumerate(value)]
        else:
            continue
        stack.extend(reversed(items))


# --------------------------------------------------------------------------- YAML


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, sizing every node as it is composed. An alias is one shared node in
    the graph but a whole copy to whatever walks the data, so each use counts its subtree in full
    and a document whose aliases add more than `ALIAS_EXPANSION_LIMIT` nodes is refused before
    anything is built from it."""

    def __init__(self, text: str, path: Path) -> None:
        super().__init__(text)
        self.path = path
        self.sizes: dict[yaml.Node, int] = {}

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            target = self.anchors.get(event.anchor)
            if target is not None and target not in self.sizes:
                raise DocumentError(
                    f"alias *{event.anchor} is used inside the node it names",
                    kind="alias_loop",
                    file=self.path,
                    line=event.start_mark.line + 1,
                    expected="aliases to nodes that do not contain them",
                )
            return super().compose_node(parent, index)
        node = super().compose_node(parent, index)
        if node is None:
            return None
        size = 1 + sum(self.sizes[child] for child in _children(node))
        self.sizes[node] = size
        # len(self.sizes) counts the nodes written so far. At the root this is the exact rule;
        # checked at every node, a bomb stops at the first level that passes the limit.
        if size > len(self.sizes) + ALIAS_EXPANSION_LIMIT:
            raise DocumentError(
                f"aliases here expand to {size:,} nodes",
                kind="alias_expansion",
                file=self.path,
                line=node.start_mark.line + 1,
                expected=f"aliases adding at most {ALIAS_EXPANSION_LIMIT:,} nodes to the document",
            )
        return node


def _children(node: yaml.Node) -> Iterator[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        yield from node.value
    elif isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            yield key
            yield value


def _parse_yaml(text: str, path: Path, allow_controls: bool) -> Document:
    loader = _BoundedLoader(text, path)
    lines: dict[str, int] = {}
    try:
        node = loader.get_single_node()
        if node is None:
            return Document(path, None, lines)
        _NodeWalk(loader, path, allow_controls, lines).visit(node, "")
        data = loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = exc.problem or exc.context or "syntax error"
        raise DocumentError(
            f"YAML syntax error: {problem}",
            kind="yaml_syntax",
            file=path,
            line=line,
            expected="valid YAML",
        ) from None
    except yaml.YAMLError as exc:
        raise DocumentError(
            f"YAML error: {exc}", kind="yaml_syntax", file=path, expected="valid YAML"
        ) from None
    finally:
        loader.dispose()
    return Document(path, data, lines)


@dataclass
class _NodeWalk:
    """One pass over a composed document, following aliases (their expansion is bounded by
    now): records the line of every dotted path and, at the first sight of each node, refuses
    duplicate keys and control characters."""

    loader: _BoundedLoader
    path: Path
    allow_controls: bool
    lines: dict[str, int]
    seen: set[yaml.Node] = field(default_factory=set)

    def visit(self, node: yaml.Node, prefix: str) -> None:
        line = node.start_mark.line + 1
        self.lines.setdefault(prefix, line)
        first = node not in self.seen
        self.seen.add(node)
        if isinstance(node, yaml.ScalarNode):
            if first and not self.allow_controls:
                _refuse_controls(node.value, self.path, prefix, line)
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                child = join_path(prefix, index)
                self.lines[child] = item.start_mark.line + 1
                self.visit(item, child)
        elif isinstance(node, yaml.MappingNode):
            if first:
                self.check_keys(node, prefix)
            # Merged keys (`<<: *defaults`) sit at the mapping's own paths; the earliest source
            # wins and the mapping's own keys win over all of them, as in the loaded data.
            merged = [v for k, v in node.value if k.tag == _MERGE_TAG]
            for source in reversed(merged):
                parts = source.value if isinstance(source, yaml.SequenceNode) else [source]
                for part in reversed(parts):
                    self.visit(part, prefix)
            for key_node, value_node in node.value:
                if key_node.tag == _MERGE_TAG:
                    continue
                child = join_path(prefix, key_node.value)
                self.lines[child] = key_node.start_mark.line + 1
                self.visit(value_node, child)

    def check_keys(self, node: yaml.MappingNode, prefix: str) -> None:
        first_line: dict[Any, int] = {}
        for key_node, _ in node.value:
            line = key_node.start_mark.line + 1
            if not isinstance(key_node, yaml.ScalarNode):
                raise DocumentError(
                    "a mapping key is itself a list or mapping",
                    kind="complex_key",
                    file=self.path,
                    path=prefix or None,
                    line=line,
                    expected="a plain key",
                )
            if key_node.tag == _MERGE_TAG:
                continue
            child = join_path(prefix, key_node.value)
            if not self.allow_controls:
                _refuse_controls(key_node.value, self.path, child, line)
            # Compare keys as loaded, so `1` and `'1'` differ while `yes` and `true` do not.
            key = self.loader.construct_object(key_node)
            if key in first_line:
                raise DuplicateKey(
                    f"duplicate key {key_node.value!r}, first at line {first_line[key]}",
                    key=key_node.value,
                    first_line=first_line[key],
                    file=self.path,
                    path=child or None,
                    line=line,
                    expected="each key once in a mapping",
                )
            first_line[key] = line


def check_output_dir(out: str | Path, *, name: str = "out", try_making: bool = True) -> None:
    """Refuse an output folder that cannot be one, before anything is written: an empty path
    (which would mean the current folder), an existing file, a path under a file, and (with
    `try_making`) a folder the machine will not let this process make or write in (`/proc/x`,
    a read-only mount): a new one is made and removed again, an existing one gets a temporary
    file. `name` is how the caller spells the setting."""
    if str(out).strip() == "":
        raise InputError(
            "the output folder is empty", path=name, expected="a folder path, e.g. results/x"
        )
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise InputError("is a file, not a folder", file=path, expected=f"a folder path for {name}")
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if parent.exists() and not parent.is_dir():
        raise InputError(
            f"{parent} is a file, so no folder can be made under it",
            file=path,
            expected=f"a folder path for {name}",
        )
    if try_making:
        _try_making(path, name)


def _try_making(path: Path, name: str) -> None:
    made: list[Path] = []
    try:
        for folder in reversed([path, *path.parents]):
            if not folder.exists():
                with contextlib.suppress(FileExistsError):  # made meanwhile: not ours to remove
                    folder.mkdir()
                    made.append(folder)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise InputError(
            f"cannot write a folder here: {exc.strerror or exc}",
            file=path,
            expected=f"a folder path for {name} on a filesystem this user may write to",
        ) from None
    finally:
        for folder in reversed(made):
            with contextlib.suppress(OSError):
                folder.rmdir()


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
    except BaseException as exc:  # whatever stopped it: no temporary file stays, and it is raised
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.filename is None:
            # A write refused by a full disk names no file; the caller's message should.
            raise OSError(exc.errno, exc.strerror, str(target)) from exc
        raise


def write_json(path: str | Path, value: Any) -> None:
    """Atomically write `value` as sorted, indented, strict JSON."""
    write_atomic(path, pretty_json(value))


def read_json(path: str | Path) -> Any:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)
