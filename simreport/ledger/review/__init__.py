"""The scenario library's review, held in the ledger: every scenario version and asset version
goes draft → reviewing → reviewed → online → offline, each step kept with who took it, when, a
note and, for a high-risk scenario going online, the publisher's risk sign-off of its sha256.
`import_scenario` registers versions, as drafts; only `transition` moves a status, as a
compare-and-set, and by default never by the version's own author for `approve` and `publish`.
The design: docs/ledger.md.
"""

from .authors import GUARDED_ACTIONS, authors
from .importing import (
    ASSET_SUFFIXES,
    DEFAULT_STATUS,
    IMPORT_REVIEWER,
    AssetFile,
    ImportedVersion,
    LoadedScenario,
    Outcome,
    ScenarioImport,
    ScenarioLoader,
    import_asset,
    import_loaded,
    import_scenario,
    library_assets,
    read_asset_file,
)
from .listing import history, history_in, list_versions, versions_in
from .transitions import (
    ACTIONS,
    SIGNOFF_DIGITS,
    Kind,
    RiskSignoff,
    Transition,
    record_transition,
    transition,
    transition_in,
)

__all__ = [
    "ACTIONS",
    "ASSET_SUFFIXES",
    "DEFAULT_STATUS",
    "GUARDED_ACTIONS",
    "IMPORT_REVIEWER",
    "SIGNOFF_DIGITS",
    "AssetFile",
    "ImportedVersion",
    "Kind",
    "LoadedScenario",
    "Outcome",
    "RiskSignoff",
    "ScenarioImport",
    "ScenarioLoader",
    "Transition",
    "authors",
    "history",
    "history_in",
    "import_asset",
    "import_loaded",
    "import_scenario",
    "library_assets",
    "list_versions",
    "read_asset_file",
    "record_transition",
    "transition",
    "transition_in",
    "versions_in",
]
