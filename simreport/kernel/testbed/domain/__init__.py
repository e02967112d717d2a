"""Domains as data: a `domain` asset's entities, tools, invariants, observations and metrics,
and a `user_flow` asset's simulated user, run by the generic testbed world."""
