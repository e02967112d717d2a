"""The base of every document model: camelCase keys in documents, snake_case in Python, unknown
keys refused, aliases on output."""

from __future__ import annotations

from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class Model(BaseModel):
    """Base for every document model: camelCase keys, no unknown keys, aliases on output."""

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        validate_by_alias=True,
        # Python code builds models with field names (Cost(llm_calls=...)); documents must use
        # the camelCase keys, which `model_validate` below enforces.
        validate_by_name=True,
        serialize_by_alias=True,
        validate_assignment=False,
    )

    key_noun: ClassVar[str] = "key"
    """What an unknown key of this model is called in error messages."""

    @classmethod
    def model_validate(
        cls,
        obj: Any,
        *,
        strict: bool | None = None,
        from_attributes: bool | None = None,
        context: Any | None = None,
        by_alias: bool | None = None,
        by_name: bool | None = None,
        **kwargs: Any,
    ) -> Self:
        """Validate a document: keys must be the camelCase aliases unless `by_name` says so."""
        return super().model_validate(
            obj,
            strict=strict,
            from_attributes=from_attributes,
            context=context,
            by_alias=True if by_alias is None else by_alias,
            by_name=False if by_name is None else by_name,
            **kwargs,
        )

    def to_doc(self) -> dict[str, Any]:
        """The document (JSON) form, with every default filled in."""
        return self.model_dump(mode="json", by_alias=True)
