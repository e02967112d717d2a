"""The link from a run to its evaluation: `quality_ref`, in one form every reader checks alike.

An evaluation of an agent-testbed run is `evaluation.json` in the run's folder, written by
`simreport evaluate`, never by the run. Its `qualityRef` is `evaluation.json#sha256:<digest>`,
the digest being the sha256 of the canonical JSON of evaluation.json without its own
`qualityRef` key. The run's result.json is left as the run wrote it (its `status.quality` stays
null); audit.json and the ledger's `run.quality_ref` take the link from evaluation.json, after
checking that the digest still matches the file's content.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .canonical import content_hash

EVALUATION_FILE = "evaluation.json"
QUALITY_REF_KEY = "qualityRef"
QUALITY_REF_PREFIX = EVALUATION_FILE + "#sha256:"


def quality_ref(evaluation: Mapping[str, Any]) -> str:
    """The quality_ref of an evaluation document (its `qualityRef` key, if any, left out)."""
    body = {k: v for k, v in evaluation.items() if k != QUALITY_REF_KEY}
    return QUALITY_REF_PREFIX + content_hash(body)


def quality_ref_problem(evaluation: Any) -> str | None:
    """Why an evaluation document's `qualityRef` cannot be trusted, or None when it matches the
    document's content."""
    if not isinstance(evaluation, Mapping):
        return "evaluation.json is not a JSON object"
    recorded = evaluation.get(QUALITY_REF_KEY)
    if not isinstance(recorded, str) or not recorded.startswith(QUALITY_REF_PREFIX):
        return f"evaluation.json has no qualityRef of the form {QUALITY_REF_PREFIX}<sha256>"
    actual = quality_ref(evaluation)
    if recorded != actual:
        return (
            f"evaluation.json was changed after it was written: its content hashes to "
            f"{actual.removeprefix(QUALITY_REF_PREFIX)}, its qualityRef says "
            f"{recorded.removeprefix(QUALITY_REF_PREFIX)}"
        )
    return None
