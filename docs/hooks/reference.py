"""MkDocs hook: adds the reference pages made from the code (the command line, the documents'
schemas) to the site as it builds; nothing is written into docs/."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files


def on_files(files: Files, config: Any) -> Files:
    root = str(Path(config.config_file_path).resolve().parent)
    if root not in sys.path:
        sys.path.insert(0, root)  # the checkout being documented, not another install
    from simreport.cli.reference import reference_pages

    for path, text in reference_pages().items():
        files.append(File.generated(config, path, content=text))
    return files
