"""Query conditions (`field op value`): parsing their text and checking them against a task's fields.

A condition reads "R.k=5", "R.k>=5", "R.name!=abc", 'R.name="a b"' or "R.k in 1,2,3"; its value is typed by the
field's kind. "S is null" (and "S is not null") picks the rows an outer, semi or anti task emitted without stream
S: it tests S's first field, as a row either lacks the stream or holds every one of its fields. `selection`
evaluates them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from windjoin.operators.plain_numbers import plain_float
from windjoin.operators.query.errors import BadQuery
from windjoin.operators.query.fields import unknown_field

MAX_CONDITION_CHARS = 4096
MAX_IN_VALUES = 1000
OPS = ("=", "!=", "<", "<=", ">", ">=", "in", "is null", "is not null")
_CONDITION = re.compile(
    r"\s*(?P<field>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?)"
    r"(?:\s*(?P<op><=|>=|!=|=|<|>)|\s+(?P<in>in)(?=\s|\Z))\s*(?P<value>.*?)\s*",
    re.DOTALL,
)
_NULL_SIDE = re.compile(r"\s*(?P<stream>[A-Za-z_][A-Za-z0-9_]*)\s+is\s+(?P<not>not\s+)?null\s*", re.IGNORECASE)
_NAME = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?)")
# one value of an `in` list and what follows it: a comma (more values) or the end of the text
_IN_ITEM = re.compile(r'\s*(?:"((?:[^"\\]|\\.)*)"|([^,"\s](?:[^,"]*[^,"\s])?))\s*(?:(,)|\Z)', re.DOTALL)
_INT = re.compile(r"[+-]?[0-9]+")
_BOOLS = {"true": True, "false": False, "1": True, "0": False}


@dataclass(frozen=True)
class Condition:
    """`field op value`; op one of "=", "!=", "<", "<=", ">", ">=", "in" (then value is a list), "is null" or
    "is not null" (no value)."""

    field: str
    op: str
    value: Any


def parse_condition(text: str, fields: Mapping[str, str]) -> Condition:
    """A condition such as "R.k=5", "R.k>=5", "R.name!=abc", 'R.name="a b"', "R.k in 1,2,3", typed by `fields`
    (name -> "int" | "float" | "string" | "bool"). Strings may be unquoted (trimmed) or "quoted" (JSON escapes).

    Raises BadQuery naming the problem: unknown field, bad operator, value not of the field's type.
    """
    if not isinstance(text, str) or len(text) > MAX_CONDITION_CHARS:
        raise BadQuery(f"where: a condition is a text of at most {MAX_CONDITION_CHARS} characters")
    side = _NULL_SIDE.fullmatch(text)
    if side is not None:
        stream = side.group("stream")
        first = next((name for name in fields if name.startswith(f"{stream}.")), None)
        if first is None:
            streams = list(dict.fromkeys(name.partition(".")[0] for name in fields if "." in name))
            raise BadQuery(f"where: {text.strip()[:100]!r}: unknown stream {stream!r} (one of {streams})")
        return Condition(first, "is not null" if side.group("not") else "is null", None)
    match = _CONDITION.fullmatch(text)
    if match is None:
        name = _NAME.match(text) if isinstance(text, str) else None
        if name is not None and name.group(1) not in fields:
            raise unknown_field("where", name.group(1), fields)
        raise BadQuery(
            f"where: {text[:100]!r} is not a condition 'field op value' (op one of {list(OPS[:7])}; "
            "e.g. 'R.k=5', 'R.k in 1,2,3', 'R.name=\"a b\"') or 'stream is null' / 'stream is not null'",
        )
    field = match.group("field")
    if field not in fields:
        raise unknown_field("where", field, fields)
    op = "in" if match.group("in") else match.group("op")
    raw = match.group("value")
    kind = fields[field]
    if op == "in":
        items = _split_in(raw, field) if raw.strip() else []
        if not items or len(items) > MAX_IN_VALUES:
            raise BadQuery(f"where: {field} in ...: between 1 and {MAX_IN_VALUES} comma-separated values")
        return Condition(field, op, [_typed(field, kind, item, quoted) for item, quoted in items])
    quoted = len(raw) >= 2 and raw[0] == raw[-1] == '"'
    if quoted:
        try:
            raw = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise BadQuery(f"where: {field}: {raw[:100]!r} is not a well-formed quoted string") from None
    return Condition(field, op, _typed(field, kind, raw, quoted))


def _split_in(raw: str, field: str) -> list[tuple[str, bool]]:
    """The values of an `in` list, strictly: `v1,v2,...`, each unquoted (no comma or quote in it, not empty) or a
    JSON-quoted string; anything else (an unterminated quote, text after a quote, an empty or trailing item) is a
    BadQuery, never a shorter list."""
    items: list[tuple[str, bool]] = []
    pos = 0
    while True:
        match = _IN_ITEM.match(raw, pos)
        if match is None:
            near = raw[pos : pos + 20]
            raise BadQuery(
                f"where: {field} in ...: malformed list at {near!r} (values are separated by commas; a value is "
                'unquoted, without commas or quotes, or "quoted")',
            )
        if match.group(1) is not None:
            try:
                items.append((orjson.loads(f'"{match.group(1)}"'), True))
            except orjson.JSONDecodeError:
                raise BadQuery(f"where: {field} in ...: a badly quoted value") from None
        else:
            items.append((match.group(2), False))
        if not match.group(3):
            return items
        pos = match.end()


def _typed(field: str, kind: str, text: str, quoted: bool) -> Any:
    """The condition value `text` as a value of the field's type, or BadQuery."""
    accepted = {
        "int": "an integer",
        "float": "a finite number in decimals, such as 1.5 or -2e3 (no '_')",
        "string": 'a string (unquoted or "quoted")',
        "bool": "true or false",
    }[kind]
    bad = BadQuery(f"where: {field} (type {kind}): {str(text)[:100]!r} is not accepted (accepted: {accepted})")
    if kind == "string":
        return text
    if quoted:
        raise bad
    text = text.strip()
    if kind == "int":
        if not _INT.fullmatch(text) or not -(2**63) <= int(text) < 2**63:
            raise bad
        return int(text)
    if kind == "float":
        value = plain_float(text)  # float() would also read "1_0" and Unicode digits
        if value is None or not math.isfinite(value):
            raise bad
        return value
    if text.lower() not in _BOOLS:
        raise bad
    return _BOOLS[text.lower()]


def check_conditions(where: Sequence[Condition] | None, fields: Mapping[str, str]) -> list[Condition]:
    """The conditions when each is a `Condition` on one of `fields` with a known op and values of the field's
    kind (they may be built without `parse_condition`); else BadQuery."""
    checked = []
    for condition in where or []:
        if not isinstance(condition, Condition):
            raise BadQuery("where: conditions are made by parse_condition")
        if condition.field not in fields:
            raise unknown_field("where", condition.field, fields)
        if condition.op not in OPS:
            raise BadQuery(f"where: operator {str(condition.op)[:20]!r} is not one of {list(OPS)}")
        if condition.op in ("is null", "is not null"):
            if condition.value is not None:
                raise BadQuery(f"where: {condition.field} {condition.op}: takes no value")
            checked.append(condition)
            continue
        kind = fields[condition.field]
        values = condition.value if condition.op == "in" else [condition.value]
        if not isinstance(values, list) or (condition.op == "in" and not 0 < len(values) <= MAX_IN_VALUES):
            raise BadQuery(f"where: {condition.field} in ...: a list of 1..{MAX_IN_VALUES} values")
        for value in values:
            if not _fits(value, kind):
                raise BadQuery(f"where: {condition.field} (type {kind}): {value!r} is not of that type")
        checked.append(condition)
    return checked


def _fits(value: Any, kind: str) -> bool:
    if kind == "bool":
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if kind == "int":
        return isinstance(value, int)
    if kind == "float":
        return isinstance(value, int | float) and math.isfinite(value)
    return isinstance(value, str)
