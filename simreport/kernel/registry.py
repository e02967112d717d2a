"""Name → implementation registries: a new world, policy, provider or rule is one file plus a
`register` call, never an edit to the engine."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from ..core.errors import InputError

T = TypeVar("T")


class Registry(Generic[T]):
    """Implementations of one kind, by name."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}
        self._modules: dict[str, str] = {}
        """Names whose module registers them when first asked for (see `lazy`)."""

    def lazy(self, name: str, module: str) -> None:
        """Know `name` now, and import `module` (which registers it) the first time it is
        asked for: a process that runs one world never loads the others."""
        self._modules[name] = module

    def register(self, name: str) -> Callable[[T], T]:
        def add(item: T) -> T:
            if name in self._items and self._items[name] is not item:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._items[name] = item
            return item

        return add

    def get(self, name: str, *, path: str | None = None) -> T:
        if name not in self._items and name in self._modules:
            importlib.import_module(self._modules[name])
        try:
            return self._items[name]
        except KeyError:
            raise InputError(
                f"unknown {self.kind} {name!r}",
                path=path,
                expected="one of " + ", ".join(self.names()),
            ) from None

    def __contains__(self, name: object) -> bool:
        return name in self._items or name in self._modules

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def names(self) -> list[str]:
        return sorted({*self._items, *self._modules})
