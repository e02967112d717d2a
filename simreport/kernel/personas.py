"""Sample each agent's persona from the scenario's population fields."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.schema import (
    CategoricalField,
    ConstantField,
    NormalField,
    Population,
    UniformField,
)


def sample_personas(population: Population, rng: np.random.Generator) -> list[dict[str, Any]]:
    """One persona per agent, its fields in name order; fields are drawn column by column in
    name order, so adding a field does not change the draws of fields that sort before it.
    Name order, not the order the scenario lists them in: that order is not part of the
    scenario's hash (a YAML round trip may change it), so it must not change the prompt."""
    n = population.n
    columns: dict[str, list[Any]] = {}
    for name in sorted(population.fields):
        spec = population.fields[name]
        if isinstance(spec, CategoricalField):
            weights = np.asarray(spec.weights or [1.0] * len(spec.values), dtype=float)
            idx = rng.choice(len(spec.values), size=n, p=weights / weights.sum())
            columns[name] = [spec.values[int(i)] for i in idx]
        elif isinstance(spec, UniformField):
            if spec.integer:
                vals = rng.integers(int(np.ceil(spec.low)), int(np.floor(spec.high)) + 1, size=n)
                columns[name] = [int(v) for v in vals]
            else:
                columns[name] = [float(v) for v in rng.uniform(spec.low, spec.high, size=n)]
        elif isinstance(spec, NormalField):
            drawn = rng.normal(spec.mean, spec.sd, size=n)
            if spec.low is not None or spec.high is not None:
                drawn = np.clip(drawn, spec.low, spec.high)
            columns[name] = [float(v) for v in drawn]
        elif isinstance(spec, ConstantField):
            columns[name] = [spec.value] * n
    return [{name: columns[name][i] for name in sorted(columns)} for i in range(n)]
