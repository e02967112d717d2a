"""The agent testbed (SPEC §8): the pieces the `refund_desk` and `testbed` worlds assemble around
a system under test — assets, boundary, settings, versions, the lifecycle and the generic run
through it, clocks, user simulator, environment, participants, agents, records, quality control
and replay. Each module's job and design: docs/testbed.md.
"""
