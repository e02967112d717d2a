"""Kernel: scenario → one run directory. Worlds, providers, policies and rules register by name.

The public names load lazily so that importing one kernel module does not load every world.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .engine import (
        KERNEL_VERSION,
        LoadedScenario,
        input_hashes,
        kernel_fingerprint,
        load_scenario,
        read_result,
        run_scenario,
        scenario_outputs,
        validate_scenario,
    )

__all__ = [
    "KERNEL_VERSION",
    "LoadedScenario",
    "input_hashes",
    "kernel_fingerprint",
    "load_scenario",
    "read_result",
    "run_scenario",
    "scenario_outputs",
    "validate_scenario",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import engine

        return getattr(engine, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
