"""The run service's HTTP API in this process (FastAPI's TestClient), on a fresh ledger with a
copy of the refund desk's asset library: what it answers is the code a `simreport api` process
runs, without starting one. Workers, when a test needs them, run beside it on the same ledger."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "refund_desk"
TOKEN = "in-process-token-0123456789abcdef"


@dataclass
class Api:
    """A client of the in-process service, its ledger's URL and its asset library."""

    client: Any
    ledger: str
    library: Path

    def post(self, path: str, body: Any, key: str | None = None) -> httpx.Response:
        headers = {"Idempotency-Key": key or uuid.uuid4().hex}
        response: httpx.Response = self.client.post(path, json=body, headers=headers)
        return response

    def get(self, path: str, **params: Any) -> httpx.Response:
        response: httpx.Response = self.client.get(path, params=params)
        return response

    def scenario(self, name: str, spec: dict[str, Any], version: str = "1.3.0") -> str:
        """A scenario named `name` with `spec` submitted as `version`; its id."""
        owner = {"namespace": "support", "name": name, "owner": "qa", "risk_level": "low"}
        created = self.post("/scenarios", owner)
        assert created.status_code == 201, created.text
        scenario_id: str = created.json()["scenario_id"]
        submitted = self.post(
            f"/scenarios/{scenario_id}/versions", {"version": version, "spec": spec}
        )
        assert submitted.status_code == 202, submitted.text
        return scenario_id

    def run(self, scenario_id: str, version: str = "1.3.0", **more: Any) -> dict[str, Any]:
        """A run of the version started: {run_id, manifest_id}."""
        started = self.post("/runs", {"scenario_id": scenario_id, "version": version, **more})
        assert started.status_code == 202, started.text
        answer: dict[str, Any] = started.json()
        return answer


def refund_spec() -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load((EXAMPLE / "scenario.yaml").read_text(encoding="utf-8"))
    return spec


@contextmanager
def in_process_api(
    ledger: str, folder: Path, example: Path = EXAMPLE, policy: Path | None = None
) -> Iterator[Api]:
    """The service on the ledger at `ledger` (a fresh one: the ledger_url fixture's), its
    library a copy of `example`'s (default: the refund desk's) in `folder`, under the execution
    policy in `policy` (None: the default)."""
    from fastapi.testclient import TestClient

    from simreport.service.app import PREFIX, create_app
    from simreport.service.auth import load_tokens
    from simreport.service.config import ServiceSettings

    root = folder / example.name
    shutil.copytree(example, root)
    settings = ServiceSettings(ledger=ledger, library=root / "assets", workers=0, policy=policy)
    tokens = load_tokens(settings, {"SIMREPORT_API_TOKENS": TOKEN})
    app = create_app(settings, tokens=tokens)
    try:
        with TestClient(
            app,
            base_url=f"http://testserver{PREFIX}",
            headers={"Authorization": f"Bearer {TOKEN}"},
            raise_server_exceptions=False,
        ) as client:
            yield Api(client, ledger, root / "assets")
    finally:
        app.state.service.engine.dispose()
