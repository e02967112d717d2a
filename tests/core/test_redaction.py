"""Credentials in URLs are used but never published: the userinfo and key-like query values of
`llm.baseUrl` are redacted in plan.json, every run folder, audit.json, the report, the methods,
the cache, error messages and the doctor's table, while the requests still carry them."""

from __future__ import annotations

import base64
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simreport.core.errors import InputError
from simreport.core.redaction import (
    MARK,
    is_redacted,
    redact_document,
    redact_secrets,
    redact_text,
    redact_url,
    url_secrets,
)
from simreport.core.schema import LLMConfig
from simreport.kernel import load_scenario, run_scenario, validate_scenario
from simreport.kernel.providers import ProviderError
from simreport.kernel.providers.cache import request_key
from simreport.kernel.providers.openai import HttpSettings, OpenAIProvider, chat_base_url
from tests.support import llm_server
from tests.support.llm_server import FakeLLM, Reply
from tests.support.refusals import refused
from tests.support.studies import plan_text, scenario_text

PASSWORD = "s3cr3t-token"
QUERY_KEY = "k3y-value"
SECRETS = (PASSWORD, QUERY_KEY)

PLAN = plan_text(concurrency=1)


def secret_url(port: int) -> str:
    return f"http://user:{PASSWORD}@127.0.0.1:{port}/v1?api_key={QUERY_KEY}"


# --------------------------------------------------------------------------- redact_url


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://user:secret@host/v1", f"http://{MARK}@host/v1"),
        ("https://tokenonly@host:8443/v1", f"https://{MARK}@host:8443/v1"),
        ("http://:pw@host/v1", f"http://{MARK}@host/v1"),
        ("http://u:p@ss@host/v1", f"http://{MARK}@host/v1"),
        ("http://u:p%40ss@[::1]:8000/v1", f"http://{MARK}@[::1]:8000/v1"),
        ("http://[::1]:8000/v1", "http://[::1]:8000/v1"),
        ("http://host/v1?api_key=abc&model=x", f"http://host/v1?api_key={MARK}&model=x"),
        (
            "http://host/v1?API-Key=a;Token=b&sig=c&X-Amz-Signature=d&api-version=2024",
            f"http://host/v1?API-Key={MARK};Token={MARK}&sig={MARK}&X-Amz-Signature={MARK}"
            "&api-version=2024",
        ),
        ("http://host/v1?password=p&secret=s", f"http://host/v1?password={MARK}&secret={MARK}"),
        ("http://host/v1?auth=a&access_token=t", f"http://host/v1?auth={MARK}&access_token={MARK}"),
        ("http://host/v1#access_token=t&x=1", f"http://host/v1#access_token={MARK}&x=1"),
        ("http://host/v1#section", "http://host/v1#section"),
        ("http://host/v1?token", "http://host/v1?token"),
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
        ("//u:p@host/v1", f"//{MARK}@host/v1"),
        ("not a url", "not a url"),
        ("user@example.org", "user@example.org"),
        ("", ""),
        ("http://[::1/v1?key=x", f"http://[::1/v1?key={MARK}"),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_a_url_without_credentials_is_unchanged_so_existing_hashes_hold() -> None:
    for url in ("http://127.0.0.1:8000/v1", "https://api.openai.com/v1", "http://h/v1?a=1#f"):
        assert redact_url(url) == url
        assert redact_document({"llm": {"baseUrl": url}}) == {"llm": {"baseUrl": url}}
        assert not is_redacted(url)


def test_a_redacted_url_is_recognised() -> None:
    assert is_redacted(redact_url("http://u:p@h/v1"))
    assert is_redacted(redact_url("http://h/v1?api_key=abc"))
    assert not is_redacted("http://h/v1?note=***")


_USERINFO_CHARS = st.sampled_from(
    list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~!$&'()*+,;=:@%")
)
_HOSTS = st.sampled_from(["127.0.0.1", "example.org", "[::1]", "host:8000", "h"])
_PATHS = st.sampled_from(["", "/", "/v1", "/api/openai/v1", "/v1/chat/completions"])


@settings(max_examples=300, deadline=None)
@given(
    scheme=st.sampled_from(["http", "https", "HTTP", "ws"]),
    user=st.text(_USERINFO_CHARS, max_size=8),
    password=st.text(_USERINFO_CHARS, min_size=1, max_size=24),
    host=_HOSTS,
    path=_PATHS,
    key=st.text(st.sampled_from(list("abcXYZ0123-_.~%")), min_size=1, max_size=24),
    name=st.sampled_from(["api_key", "apikey", "KEY", "token", "access_token", "sig", "Auth"]),
)
def test_redact_url_never_shows_the_password_or_the_key(
    scheme: str, user: str, password: str, host: str, path: str, key: str, name: str
) -> None:
    url = f"{scheme}://{user}:{password}@{host}{path}?model=m&{name}={key}#frag"
    shown = redact_url(url)
    assert shown == f"{scheme}://{MARK}@{host}{path}?model=m&{name}={MARK}#frag"
    skeleton = shown.replace(MARK, "")
    # A password of asterisks is part of the mark itself; the equality above covers it.
    if password not in skeleton and password not in MARK:
        assert password not in shown
    if key not in skeleton:
        assert key not in shown


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_redaction_never_raises(text: str) -> None:
    assert isinstance(redact_url(text), str)
    assert isinstance(redact_text(text), str)
    assert isinstance(is_redacted(text), bool)
    assert isinstance(url_secrets(text), tuple)
    assert isinstance(redact_secrets(text, url_secrets(text)), str)
    redact_document({"baseUrl": text, text: [text, (text,), 1, None]})


def test_redact_url_tolerates_what_is_not_text() -> None:
    assert redact_url(None) == "None"  # type: ignore[arg-type]
    assert redact_document(None) is None
    assert redact_document(3.5) == 3.5


def test_redact_document_covers_every_url_in_a_tree() -> None:
    doc = {
        "base": {"llm": {"baseUrl": "http://u:pw12@h/v1", "model": "m"}},
        "axes": [{"levels": ["http://a:bc99@h/v1", "plain"]}],
        "note": "calls http://h/v1?token=zz99 when asked",
        "n": 3,
    }
    shown = redact_document(doc)
    assert shown["base"]["llm"] == {"baseUrl": f"http://{MARK}@h/v1", "model": "m"}
    assert shown["axes"][0]["levels"] == [f"http://{MARK}@h/v1", "plain"]
    assert shown["note"] == f"calls http://h/v1?token={MARK} when asked"
    assert shown["n"] == 3
    assert doc["base"]["llm"]["baseUrl"] == "http://u:pw12@h/v1"  # a copy: the input is kept


def test_secrets_in_free_text_are_blanked() -> None:
    url = f"http://user:{PASSWORD}@h/v1?api_key={QUERY_KEY}"
    basic = base64.b64encode(f"user:{PASSWORD}".encode()).decode()
    text = f"server said: bad {PASSWORD} ({basic}) for {url} and {QUERY_KEY}"
    clean = redact_secrets(text, url_secrets(url))
    for secret in (*SECRETS, basic):
        assert secret not in clean


# --------------------------------------------------------------------------- the provider


class QueryFakeLLM(FakeLLM):
    """The loopback server, also serving its endpoint under a query string (`?api_key=…`) and
    remembering each request line."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.paths: list[str] = []

    def start(self) -> QueryFakeLLM:
        owner = self
        plain = llm_server._Handler

        class Handler(plain):  # type: ignore[valid-type,misc]
            def do_POST(self) -> None:
                owner.paths.append(self.path)
                self.path = self.path.split("?", 1)[0]
                super().do_POST()

        llm_server._Handler = Handler  # start() subclasses the module's handler
        try:
            super().start()
        finally:
            llm_server._Handler = plain
        return self


@pytest.fixture
def server() -> Iterator[QueryFakeLLM]:
    with QueryFakeLLM(answer="hash") as fake:
        yield fake


def _provider(url: str, **settings: Any) -> OpenAIProvider:
    config = LLMConfig.model_validate({"provider": "openai", "model": "test", "baseUrl": url})
    base = HttpSettings.from_config(config, {})
    fields = {"backoff_seconds": 0.0, "retries": 0, **settings}
    return OpenAIProvider(config, settings=base.__class__(**{**base.__dict__, **fields}), env={})


def _request() -> Any:
    from simreport.kernel.providers import ChatRequest, Message

    return ChatRequest(
        messages=(Message("user", "Hello."),), model="test", temperature=0.0, max_tokens=8, seed=1
    )


def test_the_request_carries_the_credentials_and_nothing_shows_them(
    server: QueryFakeLLM,
) -> None:
    provider = _provider(secret_url(server.port))
    try:
        provider.complete(_request())
        described = json.dumps(provider.describe())
    finally:
        provider.close()
    # httpx turns the userinfo into Basic authorisation and keeps the query on the endpoint.
    basic = base64.b64encode(f"user:{PASSWORD}".encode()).decode()
    assert server.headers[0]["authorization"] == f"Basic {basic}"
    assert server.paths == [f"/v1/chat/completions?api_key={QUERY_KEY}"]
    assert f"http://{MARK}@127.0.0.1:{server.port}/v1?api_key={MARK}" in described
    assert not any(secret in described for secret in SECRETS)


def test_chat_base_url_keeps_the_query_and_drops_the_fragment() -> None:
    assert chat_base_url("http://h?api_key=x") == "http://h/v1?api_key=x"
    assert chat_base_url("http://h/v1/chat/completions/?k=1#f") == "http://h/v1?k=1"
    with pytest.raises(ProviderError) as caught:
        chat_base_url(f"ftp://user:{PASSWORD}@h/v1")
    assert PASSWORD not in caught.value.message


def test_a_redacted_url_is_refused_not_sent(server: QueryFakeLLM) -> None:
    with pytest.raises(ProviderError) as caught:
        _provider(redact_url(secret_url(server.port)))
    assert caught.value.kind == "BadConfig" and caught.value.stage == "initializing"
    assert "redacted" in caught.value.message
    assert server.calls == 0


@pytest.mark.parametrize(
    "reply",
    [
        Reply(status=401, body=f'{{"error": {{"message": "bad password {PASSWORD}"}}}}'.encode()),
        Reply(status=404, body=f"no such key {QUERY_KEY}".encode()),
        Reply(status=500),
        Reply(status=200, body=f"not json {PASSWORD}".encode()),
    ],
)
def test_no_provider_error_shows_the_urls_credentials(server: QueryFakeLLM, reply: Reply) -> None:
    server.push(reply)
    provider = _provider(secret_url(server.port))
    try:
        with pytest.raises(ProviderError) as caught:
            provider.complete(_request())
    finally:
        provider.close()
    assert not any(secret in caught.value.message for secret in SECRETS), caught.value.message


def test_an_unreachable_endpoint_fails_without_showing_the_credentials() -> None:
    provider = _provider(secret_url(_closed_port()))
    try:
        with pytest.raises(ProviderError) as caught:
            provider.complete(_request())
    finally:
        provider.close()
    assert caught.value.kind == "ConnectionFailed"
    assert not any(secret in caught.value.message for secret in SECRETS)


def test_the_cache_key_and_entries_do_not_depend_on_the_credentials() -> None:
    request = _request()
    real = request_key("openai", secret_url(8000), request)
    other = request_key("openai", "http://other:pw@127.0.0.1:8000/v1?api_key=other", request)
    assert real == other == request_key("openai", redact_url(secret_url(8000)), request)
    plain = "http://127.0.0.1:8000/v1"
    assert request_key("openai", plain, request) != real


def test_the_doctor_shows_the_endpoint_redacted(server: QueryFakeLLM) -> None:
    from simreport.doctor import doctor_rows, format_table

    rows = doctor_rows(secret_url(server.port), "test", parallel=2, timeout_seconds=5)
    table = format_table(rows)
    assert f"http://{MARK}@127.0.0.1:{server.port}/v1/chat/completions?api_key={MARK}" in table
    assert not any(secret in table for secret in SECRETS)
    assert server.calls > 0
    with pytest.raises(InputError) as caught:
        doctor_rows(f"ftp://user:{PASSWORD}@h", "test")
    assert PASSWORD not in caught.value.one_line()


def test_mcp_tool_answers_and_errors_are_redacted() -> None:
    from simreport.mcp_server import _tool_errors

    def answer() -> dict[str, Any]:
        return {"llm": {"baseUrl": secret_url(1)}}

    def fail() -> dict[str, Any]:
        raise InputError(f"cannot reach {secret_url(1)}")

    def crash() -> dict[str, Any]:
        raise RuntimeError(f"boom at {secret_url(1)}")

    shown = json.dumps(_tool_errors(answer)())
    assert not any(secret in shown for secret in SECRETS)
    for tool in (fail, crash):
        result = _tool_errors(tool)()
        text = result.content[0].text  # type: ignore[union-attr]
        assert result.is_error and MARK in text  # type: ignore[union-attr]
        assert not any(secret in text for secret in SECRETS)


# --------------------------------------------------------------------------- end to end


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def study(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SIMREPORT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SIMREPORT_CACHE_MODE", raising=False)
    monkeypatch.setenv("SIMREPORT_LLM_RETRIES", "0")
    monkeypatch.setenv("SIMREPORT_LLM_BACKOFF_SECONDS", "0.001")
    folder = tmp_path / "study"
    folder.mkdir()
    (folder / "audit.yaml").write_text(PLAN)
    return folder


def _write_scenario(study: Path, url: str) -> None:
    llm = {"provider": "openai", "model": "test", "baseUrl": url}
    (study / "scenario.yaml").write_text(scenario_text(steps=2, llm=llm))


def _leaks(root: Path) -> list[str]:
    """Every file under `root` holding one of the secrets."""
    return [
        f"{path.relative_to(root)}: {secret}"
        for path in sorted(root.rglob("*"))
        if path.is_file()
        for secret in SECRETS
        if secret.encode() in path.read_bytes()
    ]


def _written_files(out: Path) -> set[str]:
    names = {p.name for p in out.rglob("*") if p.is_file()}
    assert {"plan.json", "audit.json", "report.html", "conditions.json"} <= names
    assert {"scenario.json", "manifest.json", "events.jsonl", "result.json"} <= names
    assert any(name.startswith("methods") for name in names)
    return names


def test_an_audit_with_credentials_in_the_base_url_publishes_none(
    study: Path, server: QueryFakeLLM
) -> None:
    import simreport

    _write_scenario(study, secret_url(server.port))
    out = study.parent / "audit"
    run = simreport.audit(study / "audit.yaml", out=out)
    assert run.failed == 0
    assert server.calls > 0
    basic = base64.b64encode(f"user:{PASSWORD}".encode()).decode()
    assert all(h["authorization"] == f"Basic {basic}" for h in server.headers)
    assert all(p.endswith(f"?api_key={QUERY_KEY}") for p in server.paths)
    _written_files(out)
    assert _leaks(out) == [] and _leaks(study.parent / "cache") == []
    assert (study.parent / "cache").is_dir()
    plan = json.loads((out / "plan.json").read_text())
    assert plan["base"]["llm"]["baseUrl"] == redact_url(secret_url(server.port))
    scenario = json.loads((out / "runs" / "base" / "0" / "scenario.json").read_text())
    assert scenario["llm"]["baseUrl"] == redact_url(secret_url(server.port))

    # Again with reuse: the redacted scenario.json still counts as the same run.
    from simreport.harness import load_plan, run_audit

    calls = server.calls
    again = run_audit(load_plan(study / "audit.yaml"), out, concurrency=1, reuse=True)
    assert again.failed == 0 and server.calls == calls
    assert _leaks(out) == []


def test_the_cli_base_url_override_publishes_no_credentials(
    study: Path, server: QueryFakeLLM, capsys: pytest.CaptureFixture[str]
) -> None:
    from simreport.cli import main

    _write_scenario(study, "http://127.0.0.1:1/v1")
    out = study.parent / "cli"
    url = secret_url(server.port)
    code = main(["audit", str(study / "audit.yaml"), "--out", str(out), "--base-url", url])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert server.calls > 0
    _written_files(out)
    assert _leaks(out) == [] and _leaks(study.parent / "cache") == []
    assert not any(secret in printed.out + printed.err for secret in SECRETS)
    plan = json.loads((out / "plan.json").read_text())
    assert plan["llmOverride"] == {"baseUrl": redact_url(url)}
    audit = json.loads((out / "audit.json").read_text())
    assert audit["options"]["llmOverride"] == {"baseUrl": redact_url(url)}


def test_an_unreachable_endpoint_with_credentials_publishes_none(
    study: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from simreport.cli import main

    url = secret_url(_closed_port())
    _write_scenario(study, url)
    out = study.parent / "dead"
    main(["audit", str(study / "audit.yaml"), "--out", str(out)])
    printed = capsys.readouterr()
    result = json.loads((out / "runs" / "base" / "0" / "result.json").read_text())
    assert result["failure"]["type"] == "ConnectionFailed"
    assert redact_url(url).split("?")[0] in result["failure"]["message"]
    events = (out / "runs" / "base" / "0" / "events.jsonl").read_text()
    assert "llm_failure" in events
    _written_files(out)
    assert _leaks(out) == []
    assert not any(secret in printed.out + printed.err for secret in SECRETS)


def test_a_run_folder_read_back_is_refused_rather_than_sent_redacted(
    study: Path, tmp_path: Path
) -> None:
    _write_scenario(study, secret_url(_closed_port()))
    scenario = load_scenario(study / "scenario.yaml").scenario
    first = run_scenario(scenario, tmp_path / "first")
    assert first.failure is not None and first.failure.type == "ConnectionFailed"
    again = load_scenario(tmp_path / "first" / "scenario.json").scenario
    second = run_scenario(again, tmp_path / "second")
    assert second.failure is not None
    assert second.failure.stage == "initializing" and "redacted" in second.failure.message
    assert _leaks(tmp_path / "first") == [] and _leaks(tmp_path / "second") == []


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "refund_desk"


def test_a_testbed_run_with_credentials_replays(tmp_path: Path) -> None:
    from simreport.kernel.replay_runner import replay_run

    loaded = load_scenario(EXAMPLE / "scenario.yaml")
    llm = loaded.scenario.llm.model_copy(update={"base_url": secret_url(9)})
    scenario = loaded.scenario.model_copy(update={"llm": llm})
    run_scenario(scenario, tmp_path / "run", asset_root=loaded.asset_root)
    assert _leaks(tmp_path / "run") == []
    report = replay_run(tmp_path / "run", tmp_path / "replayed")
    assert report.ok, report.summary()


def test_an_external_simulator_gets_the_real_url_and_publishes_none(tmp_path: Path) -> None:
    """The simulator reads the endpoint it must call (credentials included) from its --config;
    the run folder keeps the redacted scenario, and a stderr echo of the URL is redacted."""
    sim = tmp_path / "sim.py"
    sim.write_text(
        "import argparse, json, pathlib, sys\n"
        "p = argparse.ArgumentParser()\n"
        "p.add_argument('--config'); p.add_argument('--seed'); p.add_argument('--out')\n"
        "a = p.parse_args()\n"
        "url = json.loads(pathlib.Path(a.config).read_text())['llm']['baseUrl']\n"
        "print('calling ' + url, file=sys.stderr)\n"
        "sys.exit(0 if '" + PASSWORD + "' in url else 3)\n"
    )
    scenario = validate_scenario(
        {
            "simulator": {"command": ["python3", "sim.py"], "metrics": ["hitRate"]},
            "llm": {"provider": "openai", "model": "m", "baseUrl": secret_url(9)},
        }
    )
    result = run_scenario(scenario, tmp_path / "run", asset_root=tmp_path)
    # Exit 0 means the simulator saw the password; it then wrote no result.json, so the run
    # fails with its stderr tail, which must not carry the credentials.
    assert result.failure is not None and result.failure.type == "SimulatorInvalidResult"
    assert "calling http://***@127.0.0.1:9" in result.failure.message
    assert _leaks(tmp_path / "run") == []


def test_an_axis_level_with_credentials_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Levels become condition ids and folder names, shown on every page: a URL with
    credentials there is refused before anything runs, naming the level."""
    from simreport.cli import main

    scenario = EXAMPLE.parent / "prisoners_dilemma" / "scenario.yaml"
    plan = tmp_path / "audit.yaml"
    plan.write_text(
        f"baseScenario: {scenario}\n"
        "axes:\n"
        "  - id: endpoint\n"
        "    level: micro\n"
        "    kind: design\n"
        "    dimension: model endpoint\n"
        "    target: llm.baseUrl\n"
        f"    levels: [http://127.0.0.1:9/v1, '{secret_url(9)}']\n"
    )
    refusal = refused(capsys, ["validate", str(plan)])
    assert refusal.code == 2 and PASSWORD not in refusal.line
    error = refusal.error
    assert (error.file, error.line, error.path) == (str(plan), 8, "axes.0.levels.1")
    assert main(["audit", str(plan), "--out", str(tmp_path / "out")]) == 2
    assert not (tmp_path / "out").exists()
