"""Review over HTTP with separation of duties, in process on SQLite and PostgreSQL
(`ledger_url`; what the app answers is what a `simreport api` process answers): a version's
author (the token that submitted it) neither approves nor publishes it (403 `self_approval`)
unless the operator's policy file allows it; a high-risk publish is signed off by the token's
name, never a name from the body, naming the sha256 it covers; asset versions are listed, shown
and reviewed end to end, every write with its Idempotency-Key; scenario versions are read back."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from simreport.ledger import tables as t
from simreport.service.models import AssetType

ROOT = Path(__file__).resolve().parents[2]
REFUND_DESK = ROOT / "examples" / "refund_desk"
VERSION = "1.3.0"

TOKENS = {
    "ana": "ana-review-token-0123456789abcdef",
    "bo": "bo-review-token-0123456789abcdef",
    "payments-only": "payments-review-token-0123456789abcdef",
    "beta": "beta-review-token-0123456789abcdef",
}
TOKEN_ENTRIES = f"""\
- name: ana
  token: {TOKENS["ana"]}
- name: bo
  token: {TOKENS["bo"]}
- name: payments-only
  token: {TOKENS["payments-only"]}
  namespaces: [payments]
- name: beta
  token: {TOKENS["beta"]}
  tenant: beta
"""

RESOLVED_ASSETS = 8
"""The asset versions the refund desk's scenario resolves."""
NOW = datetime(2026, 11, 30, 19, 3, tzinfo=UTC)
"""The service's clock: when its review steps are taken."""


class Api:
    """The app, called as each token."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def post(
        self, who: str, path: str, body: Any = None, *, key: str | None = "new"
    ) -> httpx.Response:
        headers = {"Authorization": f"Bearer {TOKENS[who]}"}
        if key is not None:
            headers["Idempotency-Key"] = uuid.uuid4().hex if key == "new" else key
        response: httpx.Response = self.client.post(
            path, json={} if body is None else body, headers=headers
        )
        return response

    def get(self, who: str, path: str, **params: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {TOKENS[who]}"}
        response: httpx.Response = self.client.get(path, params=params, headers=headers)
        return response


@contextmanager
def service(ledger: str, library: Path, policy: Path | None = None) -> Iterator[Api]:
    from fastapi.testclient import TestClient

    from simreport.service.app import PREFIX, create_app
    from simreport.service.auth import load_tokens
    from simreport.service.config import ServiceSettings

    settings = ServiceSettings(ledger=ledger, library=library, policy=policy)
    tokens = load_tokens(settings, {"SIMREPORT_API_TOKENS": TOKEN_ENTRIES})
    app = create_app(settings, tokens=tokens, clock=lambda: NOW)
    try:
        with TestClient(
            app, base_url=f"http://testserver{PREFIX}", raise_server_exceptions=False
        ) as client:
            yield Api(client)
    finally:
        app.state.service.engine.dispose()


@pytest.fixture
def library(tmp_path: Path) -> Path:
    shutil.copytree(REFUND_DESK / "assets", tmp_path / "assets")
    return tmp_path / "assets"


@pytest.fixture
def api(ledger_url: str, library: Path) -> Iterator[Api]:
    with service(ledger_url, library) as made:
        yield made


def _ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json()


def _error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert error["code"] == code, error
    return error


def _scenario(api: Api, *, risk_level: str = "high", namespace: str = "payments") -> str:
    """A scenario of `risk_level` whose version 1.3.0 `ana` submitted (so `ana` wrote it)."""
    body = {
        "namespace": namespace,
        "name": f"refund-{uuid.uuid4().hex[:8]}",
        "owner": "qa",
        "risk_level": risk_level,
    }
    scenario_id: str = _ok(api.post("ana", "/scenarios", body), 201)["scenario_id"]
    spec = yaml.safe_load((REFUND_DESK / "scenario.yaml").read_text(encoding="utf-8"))
    spec["identity"]["riskLevel"] = risk_level
    submitted = api.post(
        "ana", f"/scenarios/{scenario_id}/versions", {"version": VERSION, "spec": spec}
    )
    assert _ok(submitted, 202) == {"status": "reviewing"}
    return scenario_id


def _show(api: Api, scenario_id: str, who: str = "ana") -> dict[str, Any]:
    shown: dict[str, Any] = _ok(api.get(who, f"/scenarios/{scenario_id}/versions/{VERSION}"))
    return shown


# --------------------------------------------------------------------------- scenario versions


def test_the_submitter_may_not_approve_or_publish_their_own_version(api: Api) -> None:
    scenario_id = _scenario(api)
    step = f"/scenarios/{scenario_id}/versions/{VERSION}"

    refused = _error(api.post("ana", f"{step}:approve"), 403, "self_approval")
    assert refused["authors"] == ["ana"]
    assert _show(api, scenario_id)["status"] == "reviewing"
    assert _ok(api.post("bo", f"{step}:approve")) == {"status": "reviewed"}

    sha = _show(api, scenario_id)["sha256"]
    publish = {"risk_signoff": {"sha256": sha}}
    _error(api.post("ana", f"{step}:publish", publish), 403, "self_approval")
    assert _ok(api.post("bo", f"{step}:publish", publish)) == {"status": "online"}

    shown = _show(api, scenario_id)
    assert (shown["status"], shown["risk_level"], shown["authors"]) == ("online", "high", ["ana"])
    assert [(s["from_status"], s["to_status"], s["reviewer"]) for s in shown["steps"]] == [
        (None, "reviewing", "ana"),
        ("reviewing", "reviewed", "bo"),
        ("reviewed", "online", "bo"),
    ]


def test_a_high_risk_signoff_is_the_tokens_own_naming_what_it_covers(api: Api) -> None:
    scenario_id = _scenario(api)
    step = f"/scenarios/{scenario_id}/versions/{VERSION}"
    _ok(api.post("bo", f"{step}:approve"))
    sha = _show(api, scenario_id)["sha256"]

    missing = _error(api.post("bo", f"{step}:publish"), 422, "risk_signoff_missing")
    assert missing["issues"][0]["path"] == "risk_signoff.sha256"
    # A name from the body is no sign-off: neither the old free text nor a signer's name.
    for body in (
        {"risk_signoff": "risk-board"},
        {"risk_signoff": {"sha256": sha, "by": "risk-board"}},
        {"risk_signoff": {"sha256": "risk-board"}},
        {"risk_signoff": {"sha256": sha[:11]}},
    ):
        error = _error(api.post("bo", f"{step}:publish", body), 422, "invalid_request")
        assert error["issues"][0]["path"].startswith("risk_signoff"), error
    other = ("0" if sha[0] != "0" else "1") + sha[1:]
    mismatch = api.post("bo", f"{step}:publish", {"risk_signoff": {"sha256": other}})
    assert _error(mismatch, 422, "risk_signoff_mismatch")["issues"][0]["path"] == (
        "risk_signoff.sha256"
    )
    # Only publishing takes one.
    signed_retire = api.post("bo", f"{step}:retire", {"risk_signoff": {"sha256": sha}})
    assert _error(signed_retire, 422, "review_refused")["issues"][0]["path"] == "risk_signoff"
    assert _show(api, scenario_id)["status"] == "reviewed"

    body = {"risk_signoff": {"sha256": sha[:12]}, "note": "signed off by the risk board"}
    published = api.post("bo", f"{step}:publish", body, key="k-publish")
    assert _ok(published) == {"status": "online"}
    # The same key and request: the stored answer, not a second step.
    assert _ok(api.post("bo", f"{step}:publish", body, key="k-publish")) == {"status": "online"}
    last = _show(api, scenario_id)["steps"][-1]
    assert last["reviewer"] == "bo" and last["note"] == "signed off by the risk board"
    assert last["at"] == "2026-11-30T19:03:00Z"  # the service's clock
    assert last["risk_signoff"] == {
        "by": "bo",
        "at": "2026-11-30T19:03:00Z",
        "covers": {"kind": "scenario", "id": scenario_id, "version": VERSION, "sha256": sha},
    }


def test_scenario_versions_are_read_back_in_their_tenant_and_namespace(api: Api) -> None:
    scenario_id = _scenario(api, namespace="hr")
    listed = _ok(api.get("ana", f"/scenarios/{scenario_id}/versions"))["versions"]
    assert [(v["version"], v["status"], v["risk_level"]) for v in listed] == [
        (VERSION, "reviewing", "high")
    ]
    assert listed[0]["last_step"]["reviewer"] == "ana"
    assert _ok(api.get("ana", f"/scenarios/{scenario_id}/versions", status="online")) == {
        "versions": []
    }
    _error(
        api.get("ana", f"/scenarios/{scenario_id}/versions", status="live"), 422, "invalid_request"
    )
    _error(api.get("ana", f"/scenarios/{scenario_id}/versions/9.9.9"), 404, "unknown_version")
    _error(api.get("beta", f"/scenarios/{scenario_id}/versions"), 404, "unknown_scenario")
    _error(api.get("payments-only", f"/scenarios/{scenario_id}/versions"), 403, "forbidden")


def test_the_operators_policy_may_allow_self_approval_of_low_risk_versions(
    ledger_url: str, library: Path, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("review:\n  selfApproval: [low]\n", encoding="utf-8")
    with service(ledger_url, library, policy) as api:
        low = _scenario(api, risk_level="low")
        step = f"/scenarios/{low}/versions/{VERSION}"
        assert _ok(api.post("ana", f"{step}:approve")) == {"status": "reviewed"}
        assert _ok(api.post("ana", f"{step}:publish")) == {"status": "online"}

        medium = _scenario(api, risk_level="medium")
        _error(
            api.post("ana", f"/scenarios/{medium}/versions/{VERSION}:approve"), 403, "self_approval"
        )
        # Assets are not risk levels: their own setting, off.
        _ok(api.post("ana", "/runs", {"scenario_id": low, "version": VERSION}), 202)
        prompt = "/assets/prompt/refund-prompt/versions/1.0.0"
        _ok(api.post("ana", f"{prompt}:submit"))
        _error(api.post("ana", f"{prompt}:approve"), 403, "self_approval")


# --------------------------------------------------------------------------- asset versions


def test_asset_versions_are_reviewed_over_http_end_to_end(api: Api) -> None:
    scenario_id = _scenario(api)
    # A run request resolves the scenario's assets and pins them: as drafts, whatever the
    # files' headers say (the agent's, the prompt's and the tool contract's say online).
    run = {"scenario_id": scenario_id, "version": VERSION}
    _ok(api.post("ana", "/runs", run), 202)
    assets = _ok(api.get("ana", "/assets"))["versions"]
    assert len(assets) == RESOLVED_ASSETS
    assert {a["status"] for a in assets} == {"draft"}
    assert {a["last_step"]["reviewer"] for a in assets} == {"run service"}
    assert _ok(api.get("ana", "/assets", status="online")) == {"versions": []}
    [prompt] = _ok(api.get("ana", "/assets", asset_type="prompt", name="refund-prompt"))["versions"]
    assert (prompt["version"], prompt["owner"]) == ("1.0.0", "agents-team")
    # A name with a slash, in the path.
    seed = _ok(api.get("ana", "/assets/env_data/env/ecom-seed/versions"))["versions"]
    assert [(v["name"], v["version"]) for v in seed] == [("env/ecom-seed", "3.0.1")]
    assert _ok(api.get("ana", "/assets/prompt/no-such/versions")) == {"versions": []}

    path = "/assets/prompt/refund-prompt/versions/1.0.0"
    shown = _ok(api.get("ana", path))
    assert (shown["asset_type"], shown["name"], shown["status"]) == (
        "prompt",
        "refund-prompt",
        "draft",
    )
    assert shown["authors"] == ["run service"] and len(shown["sha256"]) == 64

    # Every write needs its Idempotency-Key.
    _error(api.post("ana", f"{path}:submit", key=None), 400, "idempotency_key_missing")
    submitted = api.post("ana", f"{path}:submit", {"note": "new wording"}, key="k-submit")
    assert _ok(submitted) == {"status": "reviewing"}
    again = api.post("ana", f"{path}:submit", {"note": "new wording"}, key="k-submit")
    assert _ok(again) == {"status": "reviewing"}
    reused = api.post("ana", f"{path}:submit", {"note": "other"}, key="k-submit")
    _error(reused, 409, "idempotency_key_reused")
    _error(api.post("ana", f"{path}:submit"), 409, "review_status")

    refused = _error(api.post("ana", f"{path}:approve"), 403, "self_approval")
    assert refused["authors"] == ["ana", "run service"]
    _error(api.post("payments-only", f"{path}:approve"), 403, "forbidden")
    assert _ok(api.post("bo", f"{path}:approve")) == {"status": "reviewed"}
    assert _ok(api.post("bo", f"{path}:publish")) == {"status": "online"}

    shown = _ok(api.get("payments-only", path))  # any token of the tenant reads
    assert [(s["to_status"], s["reviewer"], s["note"]) for s in shown["steps"]][1:] == [
        ("reviewing", "ana", "new wording"),
        ("reviewed", "bo", None),
        ("online", "bo", None),
    ]
    assert (shown["steps"][0]["to_status"], shown["steps"][0]["reviewer"]) == (
        "draft",
        "run service",
    )
    assert shown["steps"][-1]["risk_signoff"] is None

    # Unknown versions and types; another tenant sees nothing.
    _error(api.get("ana", "/assets/prompt/refund-prompt/versions/9.9.9"), 404, "unknown_version")
    _error(
        api.post("bo", "/assets/prompt/refund-prompt/versions/9.9.9:approve"),
        404,
        "unknown_version",
    )
    _error(api.post("bo", "/assets/prompt/no-such/versions/1.0.0:approve"), 404, "unknown_version")
    _error(api.get("ana", "/assets/colour/refund-prompt/versions/1.0.0"), 422, "invalid_request")
    _error(api.post("bo", f"{path}:promote"), 422, "invalid_request")
    _error(api.get("beta", path), 404, "unknown_version")
    assert _ok(api.get("beta", "/assets")) == {"versions": []}

    # Everything the run resolves reviewed and published: a regression run is accepted.
    regression = {**run, "purpose": "regression"}
    _error(api.post("ana", "/runs", regression), 422, "version_not_online")
    for asset in _ok(api.get("ana", "/assets", status="draft"))["versions"]:
        at = f"/assets/{asset['asset_type']}/{asset['name']}/versions/{asset['version']}"
        _ok(api.post("ana", f"{at}:submit"))
        _ok(api.post("bo", f"{at}:approve"))
        _ok(api.post("bo", f"{at}:publish"))
    step = f"/scenarios/{scenario_id}/versions/{VERSION}"
    _ok(api.post("bo", f"{step}:approve"))
    sha = _show(api, scenario_id)["sha256"]
    _ok(api.post("bo", f"{step}:publish", {"risk_signoff": {"sha256": sha}}))
    assert set(_ok(api.post("ana", "/runs", regression), 202)) == {"run_id", "manifest_id"}


def test_the_asset_types_are_the_ledgers() -> None:
    assert AssetType.__args__ == t.ASSET_TYPES  # type: ignore[attr-defined]


def test_openapi_documents_the_review_routes_and_bodies(api: Api) -> None:
    document = api.client.get("http://testserver/openapi.json").json()
    prefix = "/v1/sim"
    assert {
        f"{prefix}/assets",
        f"{prefix}/assets/{{asset_type}}/{{name}}/versions",
        f"{prefix}/assets/{{asset_type}}/{{name}}/versions/{{version}}",
        f"{prefix}/assets/{{asset_type}}/{{name}}/versions/{{version}}:{{action}}",
        f"{prefix}/scenarios/{{scenario_id}}/versions/{{version}}",
    } <= set(document["paths"])
    review = document["paths"][
        f"{prefix}/assets/{{asset_type}}/{{name}}/versions/{{version}}:{{action}}"
    ]
    assert {"403", "409", "422"} <= set(review["post"]["responses"])
    schemas = document["components"]["schemas"]
    assert set(schemas["RiskSignoffRequest"]["properties"]) == {"sha256"}
    assert set(schemas["AssetVersionDetail"]["required"]) >= {"authors", "steps", "sha256"}
