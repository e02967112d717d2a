"""A real `simreport api` (and its workers) on one ledger, started for the security tests, and
the requests they make of it."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa
import yaml

from simreport.ledger import connect
from simreport.ledger import tables as t
from tests.support.service_helpers import free_port, simreport_command

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "refund_desk"
TOKEN = "policy-token-0123456789abcdef"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}
TIMEOUT = 30.0
WAIT = 60.0


class Service:
    """`simreport api` (with one worker, or none) of one ledger; the test's requests."""

    def __init__(self, tmp: Path, ledger: str, policy: Path, library: Path, env: dict[str, str]):
        self.tmp, self.ledger, self.policy, self.library, self.env = (
            tmp,
            ledger,
            policy,
            library,
            env,
        )
        tokens = tmp / "tokens.yaml"
        tokens.write_text(f"- name: ana\n  token: {TOKEN}\n", encoding="utf-8")
        self.tokens = tokens
        self.processes: list[subprocess.Popen[bytes]] = []
        self.url = ""
        self.names = 0

    def start(self, *options: str) -> Service:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        command = [
            *simreport_command(),
            *("api", "--ledger", self.ledger, "--port", str(port)),
            *("--library", str(self.library), "--tokens-file", str(self.tokens)),
            *("--policy", str(self.policy), "--lease-seconds", "10", *options),
        ]
        process = self._spawn("api", command)
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            assert process.poll() is None, self.log("api")
            try:
                if httpx.get(self.url + "/openapi.json", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise AssertionError("the API did not start:\n" + self.log("api"))

    def worker(self, policy: Path) -> None:
        command = [
            *simreport_command(),
            *("worker", "--ledger", self.ledger, "--library", str(self.library)),
            *("--policy", str(policy), "--lease-seconds", "10", "--heartbeat-seconds", "1"),
        ]
        self._spawn("worker", command)

    def _spawn(self, name: str, command: list[str]) -> subprocess.Popen[bytes]:
        with (self.tmp / f"{name}.log").open("ab") as out:
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=self.env)
        self.processes.append(process)
        return process

    def log(self, name: str) -> str:
        path = self.tmp / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)

    # ----------------------------------------------------------------- requests

    def post(self, path: str, body: Any) -> httpx.Response:
        self.names += 1
        headers = {**HEADERS, "Idempotency-Key": f"k-{self.names}-{time.monotonic_ns()}"}
        return httpx.post(self.url + path, json=body, headers=headers, timeout=TIMEOUT)

    def get(self, path: str, **params: Any) -> httpx.Response:
        return httpx.get(self.url + path, params=params, headers=HEADERS, timeout=TIMEOUT)

    def scenario(self) -> str:
        self.names += 1
        body = {"namespace": "qa", "name": f"s{self.names}", "owner": "qa", "risk_level": "low"}
        created = self.post("/v1/sim/scenarios", body)
        assert created.status_code == 201, created.text
        return str(created.json()["scenario_id"])

    def submit(self, spec: dict[str, Any], version: str = "1.3.0") -> tuple[str, httpx.Response]:
        scenario_id = self.scenario()
        answer = self.post(
            f"/v1/sim/scenarios/{scenario_id}/versions", {"version": version, "spec": spec}
        )
        return scenario_id, answer

    def run(self, scenario_id: str, version: str = "1.3.0", seed: int = 1) -> httpx.Response:
        body = {"scenario_id": scenario_id, "version": version, "seed": seed}
        return self.post("/v1/sim/runs", body)

    def ended(self, run_id: str) -> dict[str, Any]:
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            status = self.get(f"/v1/sim/runs/{run_id}").json()
            if status["execution_status"] not in ("pending", "running"):
                return dict(status)
            time.sleep(0.2)
        raise AssertionError(f"run {run_id} did not end:\n{self.log('worker')}{self.log('api')}")

    def row(self, run_id: str) -> Any:
        engine = connect(self.ledger)
        try:
            with engine.connect() as conn:
                return conn.execute(sa.select(t.run).where(t.run.c.run_id == run_id)).one()
        finally:
            engine.dispose()

    def manifest_document(self, manifest_id: str) -> dict[str, Any]:
        engine = connect(self.ledger)
        try:
            with engine.connect() as conn:
                query = sa.select(t.manifest.c.document).where(
                    t.manifest.c.manifest_id == manifest_id
                )
                return dict(conn.execute(query).scalar_one())
        finally:
            engine.dispose()


def refund_spec(**changes: Any) -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load((EXAMPLE / "scenario.yaml").read_text(encoding="utf-8"))
    for dotted, value in changes.items():
        node = spec
        *parents, last = dotted.split("__")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return spec
