"""The run service (SPEC §11): `/v1/sim` over the ledger, queued runs claimed by workers.

`queue` holds every state change as a ledger transaction, `worker` claims and executes runs,
`app` builds the HTTP API from its `routers`, and `serve` serves it (`simreport api`).
Importing this package loads none of them.
"""
