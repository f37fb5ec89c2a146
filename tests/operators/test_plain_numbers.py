"""Numbers as text are read strictly: what int() and float() also take ('1_0', ' 1 ', Unicode digits) is refused."""

from __future__ import annotations

import pytest

from windjoin.operators.plain_numbers import plain_float, plain_int


@pytest.mark.parametrize(("text", "value"), [("0", 0), ("-12", -12), ("+7", 7), ("9" * 64, int("9" * 64))])
def test_plain_whole_numbers_are_read(text, value):
    assert plain_int(text) == value


@pytest.mark.parametrize("text", ["1_0", " 1", "1 ", "\u0661", "1.0", "", "-", "9" * 65, "0x10", None])
def test_anything_else_is_no_whole_number(text):
    assert plain_int(text) is None


@pytest.mark.parametrize(
    ("text", "value"), [("0.25", 0.25), ("1", 1.0), ("-.5", -0.5), ("5.", 5.0), ("1e-05", 1e-05), ("2E+3", 2000.0)]
)
def test_plain_decimals_are_read(text, value):
    assert plain_float(text) == value


@pytest.mark.parametrize("text", ["0.2_5", "1_0", " 0.5", "0.5 ", "nan", "inf", "-Infinity", "\u0661.5", "1e", ".", ""])
def test_anything_else_is_no_decimal(text):
    assert plain_float(text) is None
