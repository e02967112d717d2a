"""The smallest study the end-to-end tests build: a four-agent prisoner's dilemma of three steps
and a plan of two framings against the base, two replications each (3 conditions, 6 runs)."""

SCENARIO = """\
world: prisoners_dilemma
steps: 3
seed: 5
population:
  n: 4
  fields:
    disposition: [cooperative, competitive]
params:
  framing: neutral
  memoryWindow: 2
"""

PLAN = """\
baseScenario: scenario.yaml
replications: 2
metrics: [cooperationRate]
axes:
  - template: linguistic_framing
    levels: [moralised, risk]
"""
