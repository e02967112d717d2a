"""Fresh processes for runs: forked from a fork server that imported what runs need once, or
spawned where the platform has no fork server."""

from __future__ import annotations

import multiprocessing
import sys
import types
from collections.abc import Sequence
from multiprocessing.context import ForkServerContext, SpawnContext


def fresh_processes(preload: Sequence[str]) -> ForkServerContext | SpawnContext:
    """A multiprocessing context whose processes have run nothing before.

    Args:
        preload: modules the fork server imports once, so that no process started from it pays
            for them. The modules the main script imported are added: multiprocessing runs the
            script again in every child it starts (a script's imports, Snakemake's included, can
            cost a second).

    Returns:
        The fork-server context (a single-threaded server started from this process, which
        exits with it), or the spawn context where there is no fork server.
    """
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([*main_script_imports(), *preload])
    return context


def main_script_imports() -> list[str]:
    """The modules a main script (not `-c` code or `-m module`) holds at its top level, as
    modules or as the modules of the names it imported from them."""
    main = sys.modules.get("__main__")
    if main is None or getattr(main, "__file__", None) is None:
        return []
    names = set()
    for name, value in vars(main).items():
        if name.startswith("__"):
            continue  # the script's own loader, spec and builtins
        if isinstance(value, types.ModuleType):
            names.add(value.__name__)
        else:
            module = getattr(value, "__module__", None)
            if isinstance(module, str) and module in sys.modules:
                names.add(module)
    return sorted(names - {"__main__", "__mp_main__"})
