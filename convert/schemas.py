"""The JSON Schemas of the report and of the promotion policy, as committed under schemas/.

    python -m convert.schemas schemas/

Editors validate a policy against schemas/policy.schema.json (e.g. a ``# yaml-language-server: $schema=`` line);
other tools read reports against schemas/report.schema.json. A test keeps the committed files in step with the code.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from convert.batch import SUMMARY_SCHEMA_VERSION, BatchSummary, Manifest
from convert.policy import Policy
from convert.reports.model import SCHEMA_VERSION, Report


def schemas() -> dict[str, str]:
    """File name → the schema's JSON text."""
    report = {"$id": f"report-{SCHEMA_VERSION}", **Report.model_json_schema()}
    policy = {"$id": "policy-1", **Policy.model_json_schema()}
    manifest = {"$id": "manifest-1", **Manifest.model_json_schema()}
    summary = {"$id": f"batch-summary-{SUMMARY_SCHEMA_VERSION}", **BatchSummary.model_json_schema()}
    return {
        name: json.dumps(schema, indent=2, sort_keys=True) + "\n"
        for name, schema in (
            ("report.schema.json", report),
            ("policy.schema.json", policy),
            ("manifest.schema.json", manifest),
            ("batch-summary.schema.json", summary),
        )
    }


def main(argv: list[str]) -> None:
    folder = Path(argv[0] if argv else "schemas")
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in schemas().items():
        (folder / name).write_text(text)


if __name__ == "__main__":
    main(sys.argv[1:])
