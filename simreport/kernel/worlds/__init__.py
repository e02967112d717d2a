"""Built-in worlds, registered by name; a new world is one module here plus its registration."""

from ...core.schema import set_world_params_source
from ..registry import Registry
from ..world import World

WORLDS: Registry[type[World]] = Registry("world")
# The scenario's JSON Schema checks `params` against the model of the scenario's world.
set_world_params_source(lambda: {name: WORLDS.get(name).Params for name in WORLDS})

# Each module registers itself on import.
from . import echo_chamber as echo_chamber  # noqa: E402
from . import prisoners_dilemma as prisoners_dilemma  # noqa: E402
from . import refund_desk as refund_desk  # noqa: E402
from . import testbed as testbed  # noqa: E402

__all__ = ["WORLDS"]
