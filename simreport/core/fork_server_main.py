"""Imported once by the fork server of run processes (`core.processes.fresh_processes`): the
server's main module takes the path of the main script of the process that started it. A
process forked from the server then finds its main module already "the script", and
multiprocessing does not run the script again in it."""

from __future__ import annotations

import os
import sys

from .processes import MAIN_PATH_VARIABLE


def adopt_main_path() -> None:
    """In the fork server only (a main module that is no script): take the parent's path."""
    main = sys.modules.get("__main__")
    path = os.environ.get(MAIN_PATH_VARIABLE)
    if main is not None and path and getattr(main, "__file__", None) is None:
        main.__file__ = path


adopt_main_path()
