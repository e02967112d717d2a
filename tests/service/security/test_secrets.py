"""Secrets never enter run data (SPEC §11a). Canaries — a database password, the service's own
tokens (a YAML list of several lines), an endpoint key that no HTTP library would send — sit
in the environment of a real `simreport api` and its worker, on SQLite and on PostgreSQL; runs
then fail in the ways that used to carry them out:

- a model endpoint whose key holds a line break (the HTTP library refused the header quoting
  the value, and the error went into the run's events);
- an agent of the library whose error quotes the environment;
- the issue's attack, a spec naming the tokens' variable as its key (refused: 422).

Nothing any client can read — run status, events, evidence, manifests — nor any row of the
ledger, nor the service's logs, holds a canary. And a run process never sees the service's
tokens.

Besides, without a service: the provider refuses such a key without quoting it, and every
form an error may quote a secret in is blanked out.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import yaml

from simreport.ledger import connect
from simreport.ledger import tables as t
from tests.service.security.running_service import Service, refund_spec
from tests.support.ledgers import POSTGRES_URL, fresh_ledger
from tests.support.llm_server import FakeLLM
from tests.support.service_helpers import add_agent

DB_CANARY = "canary-db-password-7f3a9c1e5b"
TOKEN_CANARY = "canary-service-token-2d4f6a8c0e"
KEY_CANARIES = ("canary-key-first-line-3b5d7f", "canary-key-second-line-9e1c3a")
CANARIES = (DB_CANARY, TOKEN_CANARY, *KEY_CANARIES)

LEAKY_AGENT = """
import os

def respond(body):
    seen = "yes" if os.environ.get("SIMREPORT_API_TOKENS") else "no"
    raise RuntimeError(
        "cannot reach the back office with " + os.environ.get("DB_PASSWORD", "-")
        + " TOKENS_SEEN=" + seen + " " + os.environ.get("SIMREPORT_API_TOKENS", "")
    )
"""


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLM]:
    with FakeLLM(answer="hash") as server:
        yield server


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def service(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM
) -> Iterator[Service]:
    if request.param == "postgresql" and not POSTGRES_URL:
        if os.environ.get("CI") == "true":
            pytest.fail("PostgreSQL is missing: .ci/run must start it", pytrace=False)
        pytest.skip("needs PostgreSQL (SIMREPORT_TEST_POSTGRES_URL)")
    tmp = tmp_path_factory.mktemp(f"secrets-{request.param}")
    root = tmp / "refund_desk"
    shutil.copytree(Path(__file__).resolve().parents[3] / "examples" / "refund_desk", root)
    (root / "leaky_agents.py").write_text(LEAKY_AGENT, encoding="utf-8")
    add_agent(root / "assets", "leaky-agent", "leaky_agents:respond")
    policy = tmp / "policy.yaml"
    endpoint = {"baseUrl": llm.url, "apiKeyEnv": "BROKEN_KEY", "models": ["test"]}
    policy.write_text(yaml.safe_dump({"endpoints": {"broken": endpoint}}), encoding="utf-8")
    env = {
        **{k: v for k, v in os.environ.items() if k != "SIMREPORT_LEDGER_URL"},
        "DB_PASSWORD": DB_CANARY,
        "SIMREPORT_API_TOKENS": f"- name: dave\n  token: {TOKEN_CANARY}\n",
        "BROKEN_KEY": "\n".join(KEY_CANARIES),
        "PYTHONUNBUFFERED": "1",
    }
    with fresh_ledger(request.param, tmp / "ledger.sqlite") as ledger:
        running = Service(tmp, ledger, policy, root / "assets", env)
        try:
            yield running.start("--workers", "1")
        finally:
            running.stop()


def _everything_a_client_reads(service: Service, run_id: str, manifest_id: str) -> str:
    found = [service.get(f"/v1/sim/runs/{run_id}").text]
    after = 0
    for _ in range(100):  # bounded: a run has far fewer pages
        page = service.get(f"/v1/sim/runs/{run_id}/events", after_seq=after, limit=1000).json()
        found.append(json.dumps(page))
        if not page["events"]:
            break
        after = page["next_seq"]
    found.append(service.get(f"/v1/sim/runs/{run_id}/evidence").text)
    found.append(service.get(f"/v1/sim/manifests/{manifest_id}").text)
    return "\n".join(found)


def _every_row_of_the_ledger(ledger: str) -> str:
    engine = connect(ledger)
    try:
        with engine.connect() as conn:
            return "\n".join(
                repr(tuple(row))
                for table in t.metadata.sorted_tables
                for row in conn.execute(sa.select(table))
            )
    finally:
        engine.dispose()


def _start(service: Service, spec: dict[str, Any]) -> tuple[str, str]:
    scenario_id, answer = service.submit(spec)
    assert answer.status_code == 202, answer.text
    started = service.run(scenario_id)
    assert started.status_code == 202, started.text
    return started.json()["run_id"], started.json()["manifest_id"]


def test_no_canary_reaches_run_data_the_ledger_or_the_logs(service: Service, llm: FakeLLM) -> None:
    runs = [
        _start(service, refund_spec(llm={"endpoint": "broken", "model": "test"})),
        _start(service, refund_spec(sut__agent="leaky-agent@1.0.0")),
    ]
    # The attack, refused before anything runs.
    _, refused = service.submit(
        refund_spec(
            llm__provider="openai", llm__baseUrl=llm.url, llm__apiKeyEnv="SIMREPORT_API_TOKENS"
        )
    )
    assert refused.status_code == 422
    seen = []
    for run_id, manifest_id in runs:
        service.ended(run_id)
        seen.append(_everything_a_client_reads(service, run_id, manifest_id))
    client = "\n".join(seen)
    ledger = _every_row_of_the_ledger(service.ledger)
    # The runs did fail where the canaries were (so there was something to keep out), and the
    # agent's process never saw the service's tokens.
    assert "BadApiKey" in ledger
    assert "TOKENS_SEEN=no" in client
    logs = service.log("api") + service.log("worker")
    for canary in CANARIES:
        assert canary not in client
        assert canary not in ledger
        assert canary not in logs
    # The service never sends an endpoint's broken key anywhere.
    assert llm.calls == 0 or all(
        not any(c in json.dumps(h) for c in KEY_CANARIES) for h in llm.headers
    )


# --------------------------------------------------------------------------- without a service


def test_a_key_no_header_can_carry_is_refused_without_quoting_it() -> None:
    from simreport.core.schema import LLMConfig
    from simreport.kernel.providers.base import ProviderError
    from simreport.kernel.providers.openai import OpenAIProvider

    config = LLMConfig(provider="openai", base_url="http://127.0.0.1:9/v1", api_key_env="K")
    with pytest.raises(ProviderError) as refused:
        OpenAIProvider(config, env={"K": "\n".join(KEY_CANARIES)})
    assert refused.value.kind == "BadApiKey"
    assert not any(c in str(refused.value) for c in KEY_CANARIES)


@pytest.mark.parametrize(
    "quoted",
    [
        lambda s: f"Illegal header value {('Bearer ' + s).encode()!r}",
        lambda s: json.dumps({"error": "Bearer " + s}),
        lambda s: f"value {s!r} refused",
        lambda s: "only the second line: " + s.splitlines()[1],
    ],
    ids=["bytes-repr", "json", "str-repr", "one-line"],
)
def test_every_form_a_secret_is_quoted_in_is_blanked_out(quoted: Any) -> None:
    from simreport.core.redaction import Scrubber, redact_secrets

    secret = "\n".join(KEY_CANARIES) + "\t'\"é"
    text = quoted(secret)
    for clean in (redact_secrets(text, [secret]), Scrubber([secret]).text(text)):
        assert not any(c in clean for c in KEY_CANARIES), clean


def test_the_worker_knows_the_environment_s_credentials_and_not_its_settings() -> None:
    from simreport.core.redaction import environment_secrets

    environ = {
        "DB_PASSWORD": DB_CANARY,
        "TEAM_KEY_VARIABLE_ODD_NAME": "x" * 12,
        "GITHUB_TOKEN": "short",
        "HOME": "/home/someone",
        "PWD": "/a/working/folder/named/like/a/password",
        "SSH_AUTH_SOCK": str(Path(__file__)),  # a path: it points at a secret
        "LANG": "C.UTF-8",
        "MY_ENDPOINT_KEY": "declared-by-name-0001",
        "PLAIN": "declared-by-name-0002",
    }
    found = environment_secrets(environ, ["PLAIN"])
    assert found == sorted([DB_CANARY, "x" * 12, "declared-by-name-0001", "declared-by-name-0002"])


def test_a_run_blanks_its_secrets_out_before_writing_and_its_records_stay_whole(
    tmp_path: Path,
) -> None:
    """The kernel blanks the run's secrets out of events, records and its failure before they
    are written and hashed, so the run folder holds none and reads back whole."""
    from simreport.core.redaction import Scrubber
    from simreport.kernel.engine import run_scenario, validate_scenario
    from simreport.ledger.rundir import read_run_dir

    root = tmp_path / "refund_desk"
    shutil.copytree(Path(__file__).resolve().parents[3] / "examples" / "refund_desk", root)
    (root / "leaky_agents.py").write_text(LEAKY_AGENT, encoding="utf-8")
    add_agent(root / "assets", "leaky-agent", "leaky_agents:respond")
    os.environ["DB_PASSWORD"] = DB_CANARY
    try:
        result = run_scenario(
            validate_scenario(refund_spec(sut__agent="leaky-agent@1.0.0")),
            tmp_path / "run",
            asset_root=root,
            secrets=[DB_CANARY],
        )
    finally:
        del os.environ["DB_PASSWORD"]
    assert Scrubber([DB_CANARY]).files_holding(tmp_path / "run") == []
    text = "".join(p.read_text() for p in (tmp_path / "run").rglob("*") if p.is_file())
    assert "[redacted]" in text  # the agent's error was there, and blanked out
    read_run_dir(tmp_path / "run")  # every record's digest matches its content
    assert result.status.execution in ("completed", "crashed")
