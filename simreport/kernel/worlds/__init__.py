"""Built-in worlds, registered by name; a new world is one module here plus its registration."""

from ...core.schema import set_world_params_source
from ..registry import Registry
from ..world import World

WORLDS: Registry[type[World]] = Registry("world")
# The scenario's JSON Schema checks `params` against the model of the scenario's world.
set_world_params_source(lambda: {name: WORLDS.get(name).Params for name in WORLDS})

# Each module registers itself when imported: the first time its world is asked for.
for _name in ("echo_chamber", "prisoners_dilemma", "refund_desk", "testbed"):
    WORLDS.lazy(_name, f"{__name__}.{_name}")

__all__ = ["WORLDS"]
