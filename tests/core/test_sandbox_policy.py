"""The execution policy's sandboxes (real tools): their hosts are the egress allowlist unless
the operator lists one, their key variables are secrets, and a URL is never a sandbox name."""

from __future__ import annotations

import pytest

from simreport.core.execution_policy import ExecutionPolicy


def test_egress_defaults_to_the_sandboxes_hosts() -> None:
    policy = ExecutionPolicy.model_validate(
        {
            "sandboxes": {
                "payments": {"baseUrl": "http://Pay.Sandbox:8080/", "apiKeyEnv": "PAY_KEY"},
                "seats": {"baseUrl": "https://seats.sandbox"},
            }
        }
    )
    assert policy.allowed_hosts() == {"pay.sandbox:8080", "seats.sandbox:443"}
    assert policy.sandboxes["payments"].base_url == "http://Pay.Sandbox:8080"
    assert "PAY_KEY" in policy.key_variables()


def test_an_egress_list_must_hold_every_sandbox() -> None:
    listed = {"sandboxes": {"p": {"baseUrl": "http://a.test:80"}}, "egress": ["a.test:80"]}
    assert ExecutionPolicy.model_validate(listed).allowed_hosts() == {"a.test:80"}
    with pytest.raises(ValueError, match=r"sandboxes\.p\.baseUrl"):
        ExecutionPolicy.model_validate({**listed, "egress": ["b.test:80"]})
    with pytest.raises(ValueError, match="host:port"):
        ExecutionPolicy.model_validate({**listed, "egress": ["http://a.test"]})


@pytest.mark.parametrize(
    "sandbox",
    [{"baseUrl": "ftp://a.test"}, {"baseUrl": "http://a.test", "apiKeyEnv": "not a name"}],
)
def test_a_sandbox_needs_an_http_url_and_a_variable_name(sandbox: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        ExecutionPolicy.model_validate({"sandboxes": {"p": sandbox}})
