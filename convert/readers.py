"""Readers of the files a user hands the tool (a policy, a manifest, a baseline or a report), with limits.

A file of a kilobyte must not cost minutes or gigabytes before it is refused:

- YAML is read without anchors and aliases. Nine levels of nine aliases each (a "billion laughs") expand to 387
  million items in 500 bytes; no policy or manifest needs them, so any anchor or alias is refused, naming its line.
  Explicit tags (``!!timestamp``, ``!!binary``) are refused too: none is needed, and some crash PyYAML's constructors.
  A value YAML resolves but Python cannot build (``2001-13-45``, an integer of 5000 digits) is a YAML error with its
  line, not a ValueError; so is text with a lone surrogate escape (``"\\ud800"``), which no path or UTF-8 file holds.
- JSON is refused past ``MAX_JSON_DEPTH`` levels of nesting, counted before it is parsed (Python's parser recurses,
  and a RecursionError is no user error); an integer too long for Python is 'not JSON'; a lone surrogate is refused
  (the renderings write UTF-8).

Every refusal is a ``ConvertError`` (exit 2, one paragraph). No framework is imported here.
"""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from convert.errors import ConvertError

# a report nests about 7 levels (report → artifacts → checks → outputs → histogram); its free-form options a few more
MAX_JSON_DEPTH = 64
# a lone UTF-16 surrogate, which a "\ud800" escape makes, and no file can be named with nor UTF-8 written with
_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_NOT_UNICODE = "text with a lone surrogate escape (such as \\ud800), which is no Unicode character"
# a JSON string (skipped whole: brackets in it do not nest), or a bracket
# a string (its closing quote optional: an unterminated one is consumed once, not rescanned from each quote) or a bracket
_JSON_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]')
ALIAS_ADVICE = "Write the values out where they are used: a policy or a manifest takes no YAML anchors (&name) or aliases (*name)."


def shown(value: Any, width: int = 80) -> str:
    """``repr(value)`` cut to ``width`` characters for a message; an integer too long for Python to print in decimal
    (a YAML ``0xfff...`` of 4000 digits reads, and then cannot be shown) is described instead."""
    try:
        text = repr(value)
    except ValueError:
        text = f"an integer of {value.bit_length()} bits" if isinstance(value, int) else f"a {type(value).__name__}"
    return text if len(text) <= width else text[: width - 3] + "..."


def json_too_deep(text: str, limit: int = MAX_JSON_DEPTH) -> int | None:
    """The line where ``text`` first nests deeper than ``limit``, or None; a linear scan that builds nothing."""
    depth = 0
    for token in _JSON_TOKEN.finditer(text):
        bracket = token.group()
        if bracket in "[{":
            depth += 1
            if depth > limit:
                return text.count("\n", 0, token.start()) + 1
        elif bracket in "]}":
            depth -= 1
    return None


def loads_json(text: str, name: str, hint: str) -> Any:
    """The data of a JSON text, or a ConvertError: ``name`` says what it is (``the baseline report b.json``), ``hint``
    what to pass instead."""
    line = json_too_deep(text)
    if line is not None:
        raise ConvertError(f"{name} nests deeper than {MAX_JSON_DEPTH} levels (line {line})", hint)
    try:
        data = json.loads(text)
    except RecursionError:  # not reached below the depth limit; kept so that no limit change makes it a traceback
        raise ConvertError(f"{name} nests too deeply", hint) from None
    except ValueError as exc:  # JSONDecodeError, and an integer of more digits than Python reads
        raise ConvertError(f"{name} is not JSON ({str(exc).split(';')[0]})", hint) from None
    if _SURROGATE_ESCAPE.search(text) or _SURROGATE.search(text):  # rare: then the whole data is checked
        try:
            json.dumps(data, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise ConvertError(f"{name} holds {_NOT_UNICODE}", hint) from None
    return data


class PlainYamlLoader(yaml.SafeLoader):
    """YAML's safe subset without anchors, aliases (so without ``<<: *name`` merges) or explicit tags (``!!binary``),
    where a value that Python cannot build is a YAML error at its line."""

    name: str

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            raise ConvertError(f"{self.name} line {event.start_mark.line + 1}: the YAML alias '*{event.anchor}' {_REFUSED}", ALIAS_ADVICE)
        if getattr(event, "anchor", None) is not None:
            raise ConvertError(f"{self.name} line {event.start_mark.line + 1}: the YAML anchor '&{event.anchor}' {_REFUSED}", ALIAS_ADVICE)
        if getattr(event, "tag", None) is not None:  # none is needed; '!!timestamp x' broke PyYAML's own constructor
            tag = event.tag.replace("tag:yaml.org,2002:", "!!")
            raise ConvertError(
                f"{self.name} line {event.start_mark.line + 1}: the YAML tag '{tag}' is refused: a policy or a manifest takes plain "
                "values, lists and mappings",
                "Remove the tag; quote the value if it is text.",
            )
        return super().compose_node(parent, index)

    def construct_object(self, node, deep=False):
        try:
            data = super().construct_object(node, deep)
        except (ValueError, OverflowError) as exc:  # a date such as 2001-13-45, an integer over Python's 4300 digits
            value = node.value if isinstance(node.value, str) else ""
            text = value if len(value) <= 40 else value[:37] + "..."
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read the value '{text}' ({str(exc).split(';')[0]})", node.start_mark
            ) from None
        if isinstance(data, str) and _SURROGATE.search(data):  # "\ud800": no file name or text holds one
            raise yaml.constructor.ConstructorError(None, None, _NOT_UNICODE, node.start_mark)
        return data


_REFUSED = "is refused: anchors and aliases are not accepted (an alias can expand a small file into billions of values)"


def load_yaml(text: str, name: str, walk=None) -> tuple[Any, Any]:
    """The data of a YAML text (None for an empty one) and what ``walk`` made of its node tree before it was built (a
    key's line, say); raises ConvertError for an anchor, an alias or a tag, yaml.YAMLError for what is not valid YAML."""
    loader = PlainYamlLoader(text)
    loader.name = name  # messages name the file
    try:
        node = loader.get_single_node()
        walked = walk(node) if walk is not None else None
        return (loader.construct_document(node) if node is not None else None), walked
    finally:
        loader.dispose()
