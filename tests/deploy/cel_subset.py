"""Evaluate the subset of CEL the chart's admission policy uses, on plain Python data (no CEL library is installed).

Literals ('text', integers, true, false, null, [lists], {maps}), names, `a.b`, `a[k]`, `!`, `&&`, `||`, `==`,
`!=`, `in`, parentheses, `has(a.b)`, `size(x)` and the `all` macro on lists and maps. Anything else is a
SyntaxError, so an expression outside the subset fails the test instead of passing unchecked. `&&` and `||`
short-circuit left to right; a missing field is a KeyError (CEL's "no such key"), as the API server would refuse.
"""

from __future__ import annotations

import re
from typing import Any

TOKEN = re.compile(r"\s*(?:(?P<str>'[^']*')|(?P<num>\d+)|(?P<name>[A-Za-z_]\w*)|(?P<op>&&|\|\||==|!=|[!.()\[\]{},:]))")


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    text = text.strip()
    while pos < len(text):
        m = TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise SyntaxError(f"unexpected {text[pos : pos + 20]!r} in {text!r}")
        kind = m.lastgroup
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


class _Parser:
    """Precedence: || < && < (==, !=, in) < ! < member/index/call."""

    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.i = 0

    def peek(self) -> str | None:
        return self.toks[self.i][1] if self.i < len(self.toks) else None

    def take(self, want: str | None = None) -> tuple[str, str]:
        tok = self.toks[self.i]
        if want is not None and tok[1] != want:
            raise SyntaxError(f"expected {want!r}, got {tok[1]!r}")
        self.i += 1
        return tok

    def parse(self) -> tuple:
        node = self.or_()
        if self.i != len(self.toks):
            raise SyntaxError(f"trailing {self.toks[self.i :]}")
        return node

    def or_(self) -> tuple:
        node = self.and_()
        while self.peek() == "||":
            self.take()
            node = ("or", node, self.and_())
        return node

    def and_(self) -> tuple:
        node = self.rel()
        while self.peek() == "&&":
            self.take()
            node = ("and", node, self.rel())
        return node

    def rel(self) -> tuple:
        node = self.unary()
        while self.peek() in ("==", "!=", "in"):
            op = self.take()[1]
            node = (op, node, self.unary())
        return node

    def unary(self) -> tuple:
        if self.peek() == "!":
            self.take()
            return ("not", self.unary())
        return self.postfix()

    def postfix(self) -> tuple:
        node = self.primary()
        while self.peek() in (".", "["):
            if self.take()[1] == ".":
                name = self.take()
                if name[0] != "name":
                    raise SyntaxError(f"field name expected, got {name}")
                if self.peek() == "(":
                    if name[1] != "all":
                        raise SyntaxError(f"method {name[1]} is outside the subset")
                    self.take("(")
                    var = self.take()[1]
                    self.take(",")
                    body = self.or_()
                    self.take(")")
                    node = ("all", node, var, body)
                else:
                    node = ("field", node, name[1])
            else:
                key = self.or_()
                self.take("]")
                node = ("index", node, key)
        return node

    def primary(self) -> tuple:
        kind, text = self.take()
        if kind == "str":
            return ("lit", text[1:-1])
        if kind == "num":
            return ("lit", int(text))
        if text == "(":
            node = self.or_()
            self.take(")")
            return node
        if text == "[":
            items = [] if self.peek() == "]" else self.items()
            self.take("]")
            return ("list", items)
        if text == "{":
            pairs = []
            while self.peek() != "}":
                key = self.or_()
                self.take(":")
                pairs.append((key, self.or_()))
                if self.peek() == ",":
                    self.take()
            self.take("}")
            return ("map", pairs)
        if kind == "name":
            if text in ("true", "false", "null"):
                return ("lit", {"true": True, "false": False, "null": None}[text])
            if text in ("has", "size"):
                self.take("(")
                arg = self.or_()
                self.take(")")
                if text == "has" and arg[0] != "field":
                    raise SyntaxError("has() takes a field selection")
                return (text, arg)
            return ("name", text)
        raise SyntaxError(f"unexpected {text!r}")

    def items(self) -> list[tuple]:
        out = [self.or_()]
        while self.peek() == ",":
            self.take()
            out.append(self.or_())
        return out


def evaluate(text: str, env: dict[str, Any]) -> Any:
    return _eval(_Parser(text).parse(), env)


def _eval(node: tuple, env: dict[str, Any]) -> Any:
    op = node[0]
    if op == "lit":
        return node[1]
    if op == "name":
        return env[node[1]]
    if op == "list":
        return [_eval(n, env) for n in node[1]]
    if op == "map":
        return {_eval(k, env): _eval(v, env) for k, v in node[1]}
    if op == "field":
        base = _eval(node[1], env)
        if not isinstance(base, dict):
            raise TypeError(f"no field {node[2]} on {type(base).__name__}")
        return base[node[2]]
    if op == "index":
        return _eval(node[1], env)[_eval(node[2], env)]
    if op == "has":
        base = _eval(node[1][1], env)
        return isinstance(base, dict) and node[1][2] in base
    if op == "size":
        return len(_eval(node[1], env))
    if op == "not":
        value = _eval(node[1], env)
        assert isinstance(value, bool), f"! of {value!r}"
        return not value
    if op in ("and", "or"):
        left = _eval(node[1], env)
        assert isinstance(left, bool), f"{op} of {left!r}"
        if left == (op == "or"):
            return left
        right = _eval(node[2], env)
        assert isinstance(right, bool), f"{op} of {right!r}"
        return right
    if op == "==":
        return _eval(node[1], env) == _eval(node[2], env)
    if op == "!=":
        return _eval(node[1], env) != _eval(node[2], env)
    if op == "in":
        return _eval(node[1], env) in _eval(node[2], env)
    if op == "all":
        items = _eval(node[1], env)
        return all(_eval(node[3], {**env, node[2]: item}) for item in items)
    raise SyntaxError(op)
