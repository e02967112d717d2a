"""The agent testbed (SPEC §8): the pieces the `refund_desk` world assembles around a system
under test — assets, boundary, settings, versions, lifecycle, clocks, user simulator,
environment, participants, agents, records, quality control and replay. Each module's job and
design: docs/testbed.md.
"""
