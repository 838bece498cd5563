"""The reference pages the documentation site generates rather than types: the command line from the click commands
(which the options table builds) and the options table itself, and the policy, manifest and report fields from their
JSON Schemas (the pydantic models). docs/hooks.py puts each where a page holds its marker, ``<!-- generated: NAME -->``.
"""

from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCHEMAS = REPO / "schemas"


def cli_reference() -> str:
    """Every command's ``--help``, then the run options with their Python keyword, policy key and default."""
    import click

    from convert import options
    from convert.cli import main

    parts = []
    for name, command in [("", main), *sorted(main.commands.items())]:
        context = click.Context(command, info_name=f"convert {name}".strip(), terminal_width=110, max_content_width=110)
        parts.append(f"## `{context.info_name}`\n\n```text\n{command.get_help(context)}\n```\n")
    rows = ["| option | Python keyword | policy key | default | what it does |", "|---|---|---|---|---|"]
    for option in options.OPTIONS:
        keyword = option.api or option.name
        default = "" if option.default in ((), None, False, "") else f"`{option.default}`"
        rows.append(
            f"| `{option.flag}` | `{keyword}` | {_code(option.policy)} | {default} | {_cell(f'{option.help} {option.details}'.strip())} |"
        )
    return "\n".join(parts) + "\n## Every run option on every surface\n\n" + "\n".join(rows) + "\n"


def schema_reference(file_name: str) -> str:
    """The fields of a committed JSON Schema as a table: dotted path, type, description."""
    schema = json.loads((SCHEMAS / file_name).read_text())
    rows = ["| field | type | what it holds |", "|---|---|---|"]
    _walk(schema, schema.get("$defs", {}), "", rows, set())
    return f"From `schemas/{file_name}` (`{schema.get('$id', '')}`).\n\n" + "\n".join(rows) + "\n"


def _walk(node: dict, defs: dict, prefix: str, rows: list[str], seen: set[str]) -> None:
    for name, field in node.get("properties", {}).items():
        path = f"{prefix}{name}"
        target, kind = _target(field, defs)
        rows.append(f"| `{path}` | {kind} | {_cell(field.get('description') or target.get('description', ''))} |")
        ref = target.get("title", "")
        if target.get("properties") and ref not in seen:
            _walk(target, defs, f"{path}{'[]' if kind.startswith('list') else ''}.", rows, seen | {ref})


def _target(field: dict, defs: dict) -> tuple[dict, str]:
    """The schema a field's value follows (through $ref, arrays, maps and optional unions), and its type in words."""
    if "$ref" in field:
        target = defs[field["$ref"].rsplit("/", 1)[1]]
        return target, "object" if target.get("properties") else _kind(target)
    if field.get("type") == "array" and isinstance(field.get("items"), dict):
        inner, kind = _target(field["items"], defs)
        return inner, f"list of {kind}"
    if field.get("type") == "object" and isinstance(field.get("additionalProperties"), dict):
        inner, kind = _target(field["additionalProperties"], defs)
        return inner, f"map to {kind}"
    options = [option for option in field.get("anyOf", []) if option.get("type") != "null"]
    if len(options) == 1:
        inner, kind = _target(options[0], defs)
        return inner, f"{kind} or null"
    return field, _kind(field)


def _kind(field: dict) -> str:
    if "enum" in field:
        return " \\| ".join(f"`{value}`" for value in field["enum"])
    if "const" in field:
        return f"`{field['const']}`"
    if "anyOf" in field:
        return " or ".join(sorted({_kind(option) for option in field["anyOf"]}))
    return str(field.get("type", "any"))


def _code(text: str | None) -> str:
    return f"`{text}`" if text else ""


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def report_changelog() -> str:
    """The report schema's versions, newest first, from convert/reports/versions.py."""
    from convert.reports.versions import SCHEMA_CHANGES

    return "\n".join(f"- **{version}**: {change}" for version, change in SCHEMA_CHANGES.items()) + "\n"


GENERATED = {
    "report-changelog": report_changelog,
    "cli": cli_reference,
    "policy-schema": lambda: schema_reference("policy.schema.json"),
    "manifest-schema": lambda: schema_reference("manifest.schema.json"),
    "report-schema": lambda: schema_reference("report.schema.json"),
    "summary-schema": lambda: schema_reference("batch-summary.schema.json"),
}
