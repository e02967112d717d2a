"""The scenario library's review, held in the ledger: every scenario version and asset version
goes draft → reviewing → reviewed → online → offline, each step kept with who took it, when, a
note and, for a high-risk scenario going online, who signed off the risk. `import_scenario`
registers versions; only `transition` moves a status, as a compare-and-set. The design:
docs/ledger.md.
"""

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
from .listing import history, list_versions
from .transitions import ACTIONS, Kind, Transition, record_transition, transition, transition_in

__all__ = [
    "ACTIONS",
    "ASSET_SUFFIXES",
    "DEFAULT_STATUS",
    "IMPORT_REVIEWER",
    "AssetFile",
    "ImportedVersion",
    "Kind",
    "LoadedScenario",
    "Outcome",
    "ScenarioImport",
    "ScenarioLoader",
    "Transition",
    "history",
    "import_asset",
    "import_loaded",
    "import_scenario",
    "library_assets",
    "list_versions",
    "read_asset_file",
    "record_transition",
    "transition",
    "transition_in",
]
