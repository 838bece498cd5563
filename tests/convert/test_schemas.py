"""The committed JSON Schemas are the code's."""

from __future__ import annotations

import json

from convert.schemas import schemas
from tests.conftest import REPO


def test_the_committed_json_schemas_match_the_code():
    for name, text in schemas().items():
        assert (REPO / "schemas" / name).read_text() == text, f"schemas/{name} is stale: run python -m convert.schemas schemas"


def test_the_example_policy_names_the_policy_schema_and_its_keys_are_in_it():
    import yaml

    policy = REPO / "examples" / "gate" / "promotion.yaml"
    assert policy.read_text().startswith("# yaml-language-server: $schema=../../schemas/policy.schema.json")
    schema = json.loads((REPO / "schemas" / "policy.schema.json").read_text())
    assert set(yaml.safe_load(policy.read_text())) <= set(schema["properties"])
