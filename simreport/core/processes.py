"""Fresh processes for runs: forked from a fork server that imported what runs need once, or
spawned where the platform has no fork server."""

from __future__ import annotations

import multiprocessing
import multiprocessing.process
import os
import sys
from collections.abc import Sequence
from multiprocessing.context import ForkServerContext, SpawnContext

MAIN_PATH_VARIABLE = "SIMREPORT_FORK_SERVER_MAIN"
"""The main script's path, handed to the fork server (read by `core.fork_server_main`)."""


def fresh_processes(preload: Sequence[str]) -> ForkServerContext | SpawnContext:
    """A multiprocessing context whose processes have run nothing before.

    Args:
        preload: modules the fork server imports once, so that no process started from it pays
            for them. Nothing of the main script is run, in the server or in its processes:
            multiprocessing otherwise runs the script again in every child it starts (a
            script's imports, Snakemake's included, cost a second), and work sent to these
            processes is the package's own functions.

    Returns:
        The fork-server context (a single-threaded server started from this process, which
        exits with it), or the spawn context where there is no fork server.
    """
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    main_path = _main_path()
    if main_path is not None:
        # The server starts with this process's environment when the first process is made.
        os.environ[MAIN_PATH_VARIABLE] = main_path
    context.set_forkserver_preload([*preload, "simreport.core.fork_server_main"])
    return context


def _main_path() -> str | None:
    """The main script's path as multiprocessing hands it to a child (absolute, normalised), or
    None when the main module is not a script (`-c` code, `-m module`, an interactive shell)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if not isinstance(path, str) or getattr(main, "__spec__", None) is not None:
        return None
    # As multiprocessing.spawn.get_preparation_data makes it: relative to the start folder.
    original_dir = getattr(multiprocessing.process, "ORIGINAL_DIR", None)
    if not os.path.isabs(path) and isinstance(original_dir, str):
        path = os.path.join(original_dir, path)
    return os.path.normpath(path)
