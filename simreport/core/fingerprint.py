"""Code fingerprints: sha256 over normalised sources, so that outputs depend on the code that makes
them and a comment, a docstring or a reformatting changes nothing.

A Python file counts by its syntax tree without string statements (docstrings, attribute
docstrings) and without positions, so comments, blank lines and layout never reach it; any other
file (templates, stylesheets) counts by its bytes. Each layer names its own sources: the kernel
for runs (`kernel_fingerprint`), the workflow for the analysis and the pages.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import os
import sys
from collections.abc import Iterable
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
"""The `simreport` package folder: fingerprints name their files relative to it."""

_DIGESTS: dict[tuple[str, int, int], str] = {}
"""Per process: (file, size, modification time) → digest of its normalised source. Every
Snakemake start asks for several fingerprints over overlapping files; each is read once."""


def normalised_source(path: Path) -> bytes:
    """What a file's fingerprint sees: a Python file's syntax tree without docstrings and
    positions, or the bytes of any other file (and of Python that does not parse: it changes
    whatever it runs, so any edit to it counts)."""
    data = path.read_bytes()
    if path.suffix != ".py":
        return data
    try:
        tree = ast.parse(data, filename=str(path))
    except (SyntaxError, ValueError):
        return b"unparsed\0" + data
    tree.body = _without_docstrings(tree.body)
    return ast.dump(tree, include_attributes=False).encode()


def _without_docstrings(block: list[ast.stmt]) -> list[ast.stmt]:
    """A block without its docstrings, nested blocks included. Only statements are visited
    (expressions hold no statements), which keeps this cheap next to parsing."""
    kept = []
    for stmt in block:
        if (
            isinstance(stmt, ast.Expr)
            and isinstance(stmt.value, ast.Constant)
            and isinstance(stmt.value.value, str)
        ):
            # A string on its own is a docstring wherever it stands: running it does nothing.
            continue
        for name in ("body", "orelse", "finalbody"):
            nested = getattr(stmt, name, None)
            if isinstance(nested, list):
                setattr(stmt, name, _without_docstrings(nested))
        for holder in (*getattr(stmt, "handlers", ()), *getattr(stmt, "cases", ())):
            holder.body = _without_docstrings(holder.body)
        kept.append(stmt)
    return kept


def source_digest(path: Path) -> str:
    """sha256 of one file's normalised source, cached per process and, for Python files, beside
    the file's bytecode (keyed by the sha256 of its bytes, so any edit misses the cache)."""
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    digest = _DIGESTS.get(key)
    if digest is None:
        digest = _stored_digest(path) if path.suffix == ".py" else None
        if digest is None:
            digest = hashlib.sha256(normalised_source(path)).hexdigest()
        _DIGESTS[key] = digest
    return digest


def _stored_digest(path: Path) -> str | None:
    """The normalised digest of a Python file from its cache file in `__pycache__` (parsing
    costs a Snakemake start more than the rest of its fingerprints), computing and storing it
    when the file's bytes changed. None where there is no bytecode cache to keep it in."""
    try:
        cache = Path(importlib.util.cache_from_source(str(path))).with_suffix(".ast-sha256")
    except (NotImplementedError, ValueError):
        return None
    raw = hashlib.sha256(path.read_bytes()).hexdigest()
    try:
        stored_raw, stored = cache.read_text(encoding="ascii").split()
        if stored_raw == raw:
            return stored
    except (OSError, ValueError, UnicodeDecodeError):
        pass  # no cache entry yet, or an unreadable one: computed below and written again
    digest = hashlib.sha256(normalised_source(path)).hexdigest()
    if not sys.dont_write_bytecode:
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")
            tmp.write_text(f"{raw} {digest}\n", encoding="ascii")
            os.replace(tmp, cache)
        except OSError:
            pass  # a read-only tree: Python keeps no bytecode there either
    return digest


def code_fingerprint(files: Iterable[Path], root: Path = PACKAGE_ROOT) -> str:
    """sha256 over the normalised sources of `files`, each named by its path under `root`
    (so moving code counts too); the order and repetitions of `files` do not matter."""
    named: dict[str, Path] = {}
    for file in files:
        path = Path(file).resolve()
        try:
            name = path.relative_to(root).as_posix()
        except ValueError:
            name = path.name
        named[name] = path
    digest = hashlib.sha256()
    for name, path in sorted(named.items()):
        digest.update(f"{name}\0{source_digest(path)}\0".encode())
    return digest.hexdigest()


def package_files(*patterns: str, root: Path = PACKAGE_ROOT) -> list[Path]:
    """Files under `root` matching glob `patterns` (`analysis/*.py`, `report/templates/*`)."""
    return sorted({path for pattern in patterns for path in root.glob(pattern) if path.is_file()})


__all__ = [
    "PACKAGE_ROOT",
    "code_fingerprint",
    "normalised_source",
    "package_files",
    "source_digest",
]
