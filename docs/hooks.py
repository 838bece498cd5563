"""mkdocs hook: fills each ``<!-- generated: NAME -->`` marker with the reference tools/docs_reference.py generates from
the code (the options table, the click commands, the JSON Schemas), so that those pages cannot drift from it."""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # mkdocs imports this file by path, not from the repository

from tools.docs_reference import GENERATED  # noqa: E402

MARKER = re.compile(r"<!-- generated: ([\w-]+) -->")


def on_page_markdown(markdown: str, **_: object) -> str:
    return MARKER.sub(lambda match: GENERATED[match[1]](), markdown)
