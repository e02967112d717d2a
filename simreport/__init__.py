"""simreport: audit LLM-driven simulations and publish the evidence.

The Python API has the command line's verbs: `validate`, `run`, `conditions`, `audit`, `analyse`,
`power`, `estimate` here, and all of them, `report` and `site` among them, in `simreport.api`
(`simreport.report` is the package that writes the pages).
"""

from __future__ import annotations

from typing import Any

from .core.package_version import __version__

_VERBS = {"analyse", "audit", "conditions", "estimate", "power", "run", "validate"}

__all__ = ["__version__", *sorted(_VERBS)]


def __getattr__(name: str) -> Any:
    # The verbs load lazily so `import simreport` stays cheap for the command line and workers.
    if name in _VERBS:
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
