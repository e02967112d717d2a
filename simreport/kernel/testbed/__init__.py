"""The agent testbed (SPEC §8): the pieces the `refund_desk` world assembles around a system
under test.

- assets: the local asset library, label → exact version + sha256, the manifest facts;
- boundary: what belongs to the SUT may not be replaced (`sut_boundary_replaced`);
- settings: declared settings the testbed does not implement are refused, naming the field;
- lifecycle: LOADING → INITIALIZING → RUNNING → DRAINING → COLLECTING → CLEANED and what each
  failure means for the run's statuses;
- clock: business, logical, monotonic and wall time, kept apart;
- user: the user simulator (state machine, provider wording, fact and disclosure checks);
- environment: the fact model behind every tool surrogate, fault injection behind a backend;
- participants: surrogate participants the agent reaches through tools of their own;
- agents: the reference agent, the HTTP and Python entry-point adapters, the LOADING probe;
- records: records → observations → evidence, completeness, metrics;
- evaluation: pass / fail / undecidable per criterion after three checks;
- replay: check a run's manifest against its own digest, re-run the run from its records and
  compare (`simreport replay`).
"""
