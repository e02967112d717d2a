"""Which provider and model make decisions (`LLMConfig`): the scenario's `llm`, and the model that
words the simulated user's messages in the agent testbed (`user.llm`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field, model_validator

from .document_model import Model
from .values import RESOURCE_NAME, HttpUrl, Int64, Number


class LLMConfig(Model):
    """Which provider and model make the agents' decisions."""

    provider: str = Field(
        "offline", min_length=1, description="Provider name: offline (embedded) or openai."
    )
    model: str = Field(
        "offline-base", min_length=1, description="Model name; offline accepts any name."
    )
    temperature: Number = Field(
        0.7, ge=0, le=2, description="Sampling temperature; forced to 0 inside an audit."
    )
    max_tokens: Int64 = Field(64, ge=1, description="Completion token limit per decision.")
    max_prompt_tokens: Int64 = Field(
        8192, ge=16, description="Prompt token limit; longer prompts fail the decision."
    )
    base_url: HttpUrl | None = Field(
        None, description="Endpoint for HTTP providers: an http(s) URL with a host."
    )
    api_key_env: str | None = Field(
        None, description="Name of the environment variable that holds the API key."
    )
    endpoint: str | None = Field(
        None,
        exclude_if=lambda value: value is None,
        pattern=RESOURCE_NAME,
        description=(
            "A model endpoint the operator declared (the run service's policy, or `simreport "
            "run --policy`), named instead of provider, baseUrl and apiKeyEnv: its provider is "
            "openai, its URL and key are the operator's."
        ),
    )
    timeout_seconds: Number = Field(60.0, gt=0, description="Per-request timeout.")
    budget_calls: Int64 | None = Field(
        None,
        ge=1,
        description=(
            "Most HTTP requests one run may send, retries included; then decisions fail as "
            "BudgetExhausted."
        ),
    )
    budget_tokens: Int64 | None = Field(
        None,
        ge=1,
        description=(
            "Most prompt + completion tokens one run may spend; then decisions fail as "
            "BudgetExhausted."
        ),
    )

    @model_validator(mode="before")
    @classmethod
    def _endpoint_is_openai(cls, data: Any) -> Any:
        # A named endpoint speaks the OpenAI protocol: a document that names one and no
        # provider reads as what it is, not as the offline stand-in.
        named = isinstance(data, Mapping) and data.get("endpoint") is not None
        if named and "provider" not in data:
            return {**data, "provider": "openai"}
        return data

    @model_validator(mode="after")
    def _endpoint_alone(self) -> LLMConfig:
        if self.endpoint is None:
            return self
        given = [
            key
            for key, value in (("baseUrl", self.base_url), ("apiKeyEnv", self.api_key_env))
            if value is not None
        ]
        if given:
            raise ValueError(
                f"an endpoint brings its own URL and key: remove {' and '.join(given)}, or "
                "the endpoint"
            )
        if self.provider != "openai":
            raise ValueError(
                f"an endpoint speaks the OpenAI protocol: provider {self.provider!r} cannot "
                "use it (leave provider out, or set it to openai)"
            )
        return self
