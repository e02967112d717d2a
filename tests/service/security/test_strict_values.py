"""Hostile values never reach the ledger or a 500 (issue 27, "strict values everywhere"): integers
beyond the signed 64-bit range or booleans for integers, NUL and other control characters,
bidirectional controls in names, URLs that are not http(s), output folders that cannot be one.

The run service is exercised in process on SQLite and PostgreSQL (what it answers is the same
code a `simreport api` process runs) and once as a real `simreport api` process on each; the
command line as the real `simreport` command. Every refusal is a located 422 (its `path`) or one
line on stderr with exit code 2, before anything runs or is stored."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
import yaml

from tests.service.test_service_api import api
from tests.support.ledgers import POSTGRES_URL, fresh_ledger
from tests.support.service_helpers import simreport_command

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"
PD_SCENARIO = EXAMPLES / "prisoners_dilemma" / "scenario.yaml"
PD_PLAN = EXAMPLES / "prisoners_dilemma" / "audit.yaml"
REFUND_DESK = EXAMPLES / "refund_desk"

TOKEN = "strict-token-0123456789abcdef"
BEYOND_INT64 = 2**63
COMMAND_TIMEOUT = 120.0

DATABASES = [
    "sqlite",
    pytest.param(
        "postgresql",
        marks=pytest.mark.requires(bool(POSTGRES_URL), "PostgreSQL (SIMREPORT_TEST_POSTGRES_URL)"),
    ),
]


def _document(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return loaded


# --------------------------------------------------------------------------- the service


@dataclass
class Service:
    """A run service on a fresh ledger with one scenario, a version of it, a pending run and a
    cancelled one (whose evidence can be asked for)."""

    client: Any
    ledger: str
    scenario_id: str
    run_id: str
    ended_run_id: str

    def post(self, path: str, body: Any = None, *, content: str | None = None) -> httpx.Response:
        headers = {"Idempotency-Key": uuid.uuid4().hex}
        if content is not None:
            headers["Content-Type"] = "application/json"
            response: httpx.Response = self.client.post(path, content=content, headers=headers)
        else:
            response = self.client.post(path, json=body, headers=headers)
        return response

    def get(self, path: str, **params: Any) -> httpx.Response:
        response: httpx.Response = self.client.get(path, params=params)
        return response


def _created(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    return body


@pytest.fixture(scope="module", params=DATABASES)
def service(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    from fastapi.testclient import TestClient

    from simreport.service.app import PREFIX, create_app
    from simreport.service.auth import load_tokens
    from simreport.service.config import ServiceSettings

    folder = tmp_path_factory.mktemp("strict")
    with fresh_ledger(request.param, folder / "ledger.sqlite") as url:
        settings = ServiceSettings(ledger=url, library=REFUND_DESK / "assets")
        tokens = load_tokens(settings, {"SIMREPORT_API_TOKENS": TOKEN})
        app = create_app(settings, tokens=tokens)
        headers = {"Authorization": f"Bearer {TOKEN}"}
        # raise_server_exceptions=False: a 500 is answered as the server would answer it.
        with TestClient(
            app,
            base_url=f"http://testserver{PREFIX}",
            headers=headers,
            raise_server_exceptions=False,
        ) as client:
            made = Service(client, url, "", "", "")
            owner = {"namespace": "ns", "name": "pd", "owner": "ana", "risk_level": "low"}
            made.scenario_id = _created(made.post("/scenarios", owner), 201)["scenario_id"]
            spec = {"world": "prisoners_dilemma", "steps": 2}
            version = {"version": "1.0.0", "spec": spec}
            _created(made.post(f"/scenarios/{made.scenario_id}/versions", version), 202)
            run = {"scenario_id": made.scenario_id, "version": "1.0.0"}
            made.run_id = _created(made.post("/runs", run), 202)["run_id"]
            made.ended_run_id = _created(made.post("/runs", run), 202)["run_id"]
            cancel = made.post(f"/runs/{made.ended_run_id}:cancel", {"reason": "ended"})
            _created(cancel, 202)
            yield made
        app.state.service.engine.dispose()


def assert_refused(response: httpx.Response, path: str) -> None:
    """A located 422: its first issue at `path`, never a 500."""
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] in ("invalid_request", "unprocessable")
    assert error["issues"][0]["path"] == path, error


def _refund_desk_spec(**changes: Any) -> dict[str, Any]:
    spec = _document(REFUND_DESK / "scenario.yaml")
    for dotted, value in changes.items():
        *parents, last = dotted.split("__")
        node = spec
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
    return spec


# NUL, then the right-to-left override, in every name and id a request carries.
@pytest.mark.parametrize("character", ["\x00", "\u202e"], ids=["nul", "rlo"])
@pytest.mark.parametrize("field", ["name", "namespace", "owner"])
def test_names_refuse_nul_and_bidirectional_controls(
    service: Service, field: str, character: str
) -> None:
    body = {"namespace": "ns", "name": f"n-{uuid.uuid4().hex[:8]}", "owner": "ana"}
    body[field] = f"a{character}b"
    assert_refused(service.post("/scenarios", {**body, "risk_level": "low"}), field)


def test_nothing_refused_is_stored(service: Service) -> None:
    """The database never holds what was refused: on SQLite, which would store NUL, too."""
    from simreport.ledger import connect
    from simreport.ledger import tables as t

    name = f"stored-{uuid.uuid4().hex[:8]}"
    body = {"namespace": "ns", "name": name + "\x00", "owner": "ana", "risk_level": "low"}
    assert_refused(service.post("/scenarios", body), "name")
    engine = connect(service.ledger)
    try:
        with engine.connect() as conn:
            names = conn.execute(sa.select(t.scenario.c.name)).scalars().all()
    finally:
        engine.dispose()
    assert not [n for n in names if n.startswith(name)]


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({"version": "1.0.1", "source": "incident\x00"}, "source"),
        ({"version": "1.0.1", "source": "incident\u202e"}, "source"),
        ({"version": "1.0.1\x00"}, "version"),
    ],
    ids=["source-nul", "source-rlo", "version-nul"],
)
def test_version_fields_refuse_hostile_text(
    service: Service, body: dict[str, Any], path: str
) -> None:
    request = {**body, "spec": {"world": "prisoners_dilemma"}}
    assert_refused(service.post(f"/scenarios/{service.scenario_id}/versions", request), path)


@pytest.mark.parametrize(
    ("spec", "path"),
    [
        (_refund_desk_spec(user__goal="my refund\x00"), "spec.user.goal"),
        ({"world": "prisoners_dilemma", "description": "\x00"}, "spec.description"),
        (
            {"world": "prisoners_dilemma", "executors": [{"options": {"params": {"\x00": 1}}}]},
            "spec.executors.0.options.params.\x00",
        ),
        ({"world": "prisoners_dilemma", "seed": BEYOND_INT64}, "spec.seed"),
        ({"world": "prisoners_dilemma", "seedPath": [0, 2**64]}, "spec.seedPath.1"),
        (
            {"world": "prisoners_dilemma", "params": {"memoryWindow": True}},
            "spec.params.memoryWindow",
        ),
        ({"world": "echo_chamber", "params": {"degree": BEYOND_INT64}}, "spec.params.degree"),
        ({"world": "prisoners_dilemma", "llm": {"maxTokens": True}}, "spec.llm.maxTokens"),
        ({"world": "prisoners_dilemma", "name": "pd\u202e"}, "spec.name"),
        (
            {"world": "prisoners_dilemma", "llm": {"baseUrl": "file:///etc/passwd"}},
            "spec.llm.baseUrl",
        ),
        (
            _refund_desk_spec(user__llm={"provider": "openai", "baseUrl": "gopher://host/x"}),
            "spec.user.llm.baseUrl",
        ),
        (
            _refund_desk_spec(execution__budget__maxTurns=BEYOND_INT64),
            "spec.execution.budget.maxTurns",
        ),
    ],
    ids=[
        "nul-goal",
        "nul-description",
        "nul-key",
        "seed-beyond-int64",
        "seed-path-beyond-int64",
        "boolean-memory-window",
        "world-param-beyond-int64",
        "boolean-token-limit",
        "rlo-name",
        "file-url",
        "gopher-url",
        "budget-beyond-int64",
    ],
)
def test_specs_refuse_hostile_values(service: Service, spec: dict[str, Any], path: str) -> None:
    version = spec.get("identity", {}).get("version", "2.0.0")
    request = {"version": version, "spec": spec}
    assert_refused(service.post(f"/scenarios/{service.scenario_id}/versions", request), path)


def test_specs_refuse_numbers_json_does_not_have(service: Service) -> None:
    """Python's JSON reader takes NaN and Infinity; no entry does (PostgreSQL's JSON refuses
    them, and no timeout or payoff is infinite)."""
    body = '{"version": "2.0.0", "spec": {"world": "prisoners_dilemma", "llm": %s}}'
    url = f"/scenarios/{service.scenario_id}/versions"
    response = service.post(url, content=body % '{"timeoutSeconds": Infinity}')
    assert_refused(response, "spec.llm.timeoutSeconds")
    response = service.post(url, content=body % '{"model": "m", "options": NaN}')
    assert_refused(response, "spec.llm.options")


@pytest.mark.parametrize(
    ("extra", "path"),
    [
        ({"seed": BEYOND_INT64}, "seed"),
        ({"seed": True}, "seed"),
        ({"seed": "12"}, "seed"),
        ({"scenario_id": "scn\x00"}, "scenario_id"),
        ({"version": "1.0.0\u202e"}, "version"),
    ],
    ids=["seed-beyond-int64", "seed-boolean", "seed-text", "scenario-id-nul", "version-rlo"],
)
def test_run_requests_refuse_hostile_values(
    service: Service, extra: dict[str, Any], path: str
) -> None:
    request = {"scenario_id": service.scenario_id, "version": "1.0.0", **extra}
    assert_refused(service.post("/runs", request), path)


def test_budgets_are_bounded(service: Service) -> None:
    """A run's budget replaces the scenario's: the same bounds hold for it."""
    spec = _refund_desk_spec()
    version = spec["identity"]["version"]
    submitted = service.post(
        f"/scenarios/{service.scenario_id}/versions", {"version": version, "spec": spec}
    )
    _created(submitted, 202)
    run = {"scenario_id": service.scenario_id, "version": version}
    for budget, path in (
        ({"maxTurns": BEYOND_INT64}, "budget.maxTurns"),
        ({"maxToolCalls": True}, "budget.maxToolCalls"),
        ({"maxTurns\x00": 3}, "budget.maxTurns\x00"),
    ):
        assert_refused(service.post("/runs", {**run, "budget": budget}), path)


@pytest.mark.parametrize("after_seq", [BEYOND_INT64, 2**64, -1])
def test_event_cursors_are_bounded(service: Service, after_seq: int) -> None:
    response = service.get(f"/runs/{service.run_id}/events", after_seq=after_seq)
    assert_refused(response, "query.after_seq")


def test_event_limits_are_bounded(service: Service) -> None:
    response = service.get(f"/runs/{service.run_id}/events", limit=2**70)
    assert_refused(response, "query.limit")


@pytest.mark.parametrize("character", ["\x00", "\u202e"], ids=["nul", "rlo"])
def test_criteria_refuse_nul_and_bidirectional_controls(service: Service, character: str) -> None:
    response = service.get(f"/runs/{service.ended_run_id}/evidence", criterion=f"c{character}")
    assert_refused(response, "query.criterion")


@pytest.mark.parametrize(
    ("method", "path", "located"),
    [
        ("get", "/runs/run-%00", "path.run_id"),
        ("get", "/runs/run-%E2%80%AE/events", "path.run_id"),
        ("get", "/manifests/manifest-%00", "path.manifest_id"),
        ("post", "/runs/run-%00:cancel", "path.run_id"),
        ("post", "/scenarios/scn-%00/versions", "path.scenario_id"),
        ("post", "/scenarios/{scenario}/versions/1.0.0%00:approve", "path.version"),
    ],
    ids=["run", "run-rlo", "manifest", "cancel", "scenario", "review-version"],
)
def test_ids_in_the_path_refuse_hostile_text(
    service: Service, method: str, path: str, located: str
) -> None:
    url = path.format(scenario=service.scenario_id)
    body = {"reason": "r"} if "cancel" in url else {"version": "1.0.0", "spec": {}}
    if "approve" in url:
        body = {}
    response = service.post(url, body) if method == "post" else service.get(url)
    assert_refused(response, located)


@pytest.mark.parametrize(
    ("path", "body", "located"),
    [
        ("/runs/{run}:cancel", {"reason": "because\x00"}, "reason"),
        ("/scenarios/{scenario}/versions/1.0.0:approve", {"note": "fine\x00"}, "note"),
        (
            "/scenarios/{scenario}/versions/1.0.0:approve",
            {"risk_signoff": "ana\u202e"},
            "risk_signoff",
        ),
    ],
    ids=["cancel-reason-nul", "review-note-nul", "risk-signoff-rlo"],
)
def test_free_text_refuses_nul(
    service: Service, path: str, body: dict[str, Any], located: str
) -> None:
    url = path.format(run=service.run_id, scenario=service.scenario_id)
    assert_refused(service.post(url, body), located)


# --------------------------------------------------------------------------- a real process


@pytest.mark.slow
def test_a_real_service_refuses_what_postgresql_cannot_store(
    ledger_url: str, tmp_path: Path
) -> None:
    """The attacks that gave 500 on PostgreSQL, against a real `simreport api` process."""
    from simreport.service.app import PREFIX

    with api(tmp_path, ledger_url) as server, server.client() as client:

        def post(path: str, body: dict[str, Any]) -> httpx.Response:
            key = {"Idempotency-Key": uuid.uuid4().hex}
            return client.post(PREFIX + path, json=body, headers=key)

        def get(path: str, **params: Any) -> httpx.Response:
            return client.get(PREFIX + path, params=params)

        owner = {"namespace": "ns", "owner": "ana", "risk_level": "low"}
        assert_refused(post("/scenarios", {**owner, "name": "a\x00b"}), "name")
        scenario_id = _created(post("/scenarios", {**owner, "name": "pd"}), 201)["scenario_id"]
        version = {"version": "1.0.0", "spec": {"world": "prisoners_dilemma"}}
        assert_refused(
            post(f"/scenarios/{scenario_id}/versions", {**version, "source": "x\x00"}), "source"
        )
        _created(post(f"/scenarios/{scenario_id}/versions", version), 202)
        run_id = _created(post("/runs", {"scenario_id": scenario_id, "version": "1.0.0"}), 202)[
            "run_id"
        ]
        assert_refused(get(f"/runs/{run_id}/events", after_seq=BEYOND_INT64), "query.after_seq")
        assert_refused(get("/runs/run-%00"), "path.run_id")
        _created(post(f"/runs/{run_id}:cancel", {"reason": "ended"}), 202)
        assert_refused(get(f"/runs/{run_id}/evidence", criterion="c\x00"), "query.criterion")


# --------------------------------------------------------------------------- the command line


def simreport(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "SIMREPORT_LEDGER_URL"}
    return subprocess.run(
        [*simreport_command(), *args],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
    )


def assert_one_line_refusal(proc: subprocess.CompletedProcess[str], *located: str) -> None:
    """Exit 2 with one `simreport:` line on stderr holding each of `located` (its file and
    dotted path), no traceback."""
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("simreport: "), proc.stderr
    for where in located:
        assert where in lines[0], proc.stderr


@pytest.mark.slow
def test_a_seed_beyond_int64_is_refused_before_the_run(tmp_path: Path) -> None:
    """It used to run, then fail to be recorded in the ledger (exit 4)."""
    out = tmp_path / "run"
    proc = simreport(
        "run",
        str(PD_SCENARIO),
        "--out",
        str(out),
        "--seed",
        "99999999999999999999999",
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "argument --seed" in proc.stderr.splitlines()[-1]
    assert "Traceback" not in proc.stderr
    assert not out.exists() and not (tmp_path / "ledger.sqlite").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("change", "located"),
    [
        ({"seed": BEYOND_INT64}, ": seed: "),
        ({"steps": True}, ": steps: "),
        ({"params": {"memoryWindow": True}}, ": params.memoryWindow: "),
        ({"llm": {"baseUrl": "file:///etc/passwd"}}, ": llm.baseUrl: "),
        ({"llm": {"baseUrl": "/v1/chat"}}, ": llm.baseUrl: "),
    ],
    ids=["seed", "boolean-steps", "boolean-memory-window", "file-url", "bare-path"],
)
def test_validate_refuses_hostile_scenario_values(
    tmp_path: Path, change: dict[str, Any], located: str
) -> None:
    doc = _document(PD_SCENARIO)
    for key, value in change.items():
        doc[key] = {**doc[key], **value} if isinstance(value, dict) and key in doc else value
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    assert_one_line_refusal(simreport("validate", str(path), cwd=tmp_path), str(path), located)


@pytest.mark.slow
def test_an_output_folder_that_cannot_be_made_is_refused(tmp_path: Path) -> None:
    """`/proc` takes no new folder: refused before the run, not an internal error (exit 1)."""
    proc = simreport("run", str(PD_SCENARIO), "--out", "/proc/x", "--no-ledger", cwd=tmp_path)
    assert_one_line_refusal(proc, "/proc/x", "--out")


@pytest.mark.slow
def test_a_results_folder_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    shutil.copy(ROOT / "config" / "schema.yaml", tmp_path / "config" / "schema.yaml")
    (tmp_path / "results.txt").write_text("a file\n", encoding="utf-8")
    config = {"plans": [str(PD_PLAN)], "results": "results.txt"}
    (tmp_path / "config" / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    proc = simreport("validate", "config/config.yaml", cwd=tmp_path)
    assert_one_line_refusal(proc, "config/config.yaml", ": results: ", "results.txt")


@pytest.mark.slow
def test_validate_checks_the_workflow_config(tmp_path: Path) -> None:
    """As the README advises (`simreport validate` on a config before `snakemake --configfile`):
    the shipped config is a workflow config, checked with the plans it lists."""
    listed = yaml.safe_load((ROOT / "config" / "config.yaml").read_text(encoding="utf-8"))["plans"]
    assert len(listed) == 6
    proc = simreport("validate", "config/config.yaml", cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith(f"ok  config/config.yaml: workflow config: {len(listed)} plans")
