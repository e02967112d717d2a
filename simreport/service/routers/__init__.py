"""The run service's routes, one module per resource: `scenarios` (scenarios, their versions
and review), `runs`, `events`, `manifests`, and `health` (/healthz, /metrics). Each is thin: it
checks the token's namespace and hands the request to the queue; refusals are answered in
one place (refusals.py)."""
