"""Decimal µs text -> integer ns, exactly, for whole columns at once.

Ascend tools write absolute epoch µs with three decimals (`1764246877078671.380`, often with a trailing TAB, in CSV
sometimes quoted); Kineto writes numbers with up to three decimals. float64 holds only ~16 significant digits, so
epoch µs with ns digits would lose the last ones: the decimal point is dropped instead and the digits, padded to
three decimals, are cast to int64 (`1764246877078671.380` -> 1764246877078671380). Rare spellings (more than three
decimals, exponents, a leading '+') go through Decimal one value at a time, rounded to the ns.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_SIMPLE = r"^-?([0-9]+\.?[0-9]*|\.[0-9]+)$"
_TRIM = ' \t\r\n"'  # CSV cells keep msprof's trailing TAB, sometimes inside quotes
_MAX_ABS_NS = 9_000_000_000_000_000_000
_FLOAT_SAFE_US = 1e12  # below this, float64 holds every ns digit of a 3-decimal µs value (2^53 ns = 9e15)
_PAD = pa.array(["000", "00", "0", ""], pa.string())  # zeros to append after n = 0..3 decimals
MISSING = ("", "N/A", "NA", "None", "null", "-")
"""Cell texts that mean "not collected" (msprof writes N/A)."""


def clean_text(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Strip whitespace, TABs and literal quotes; the not-collected markers become null."""
    arr = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    if not pa.types.is_string(arr.type) and not pa.types.is_large_string(arr.type):
        arr = pc.cast(arr, pa.string())
    trimmed = pc.utf8_trim(arr, characters=_TRIM)
    missing = pc.equal(pc.binary_length(trimmed), 0)
    for marker in MISSING[1:]:  # a few equality passes: cheaper than hashing every cell (is_in)
        missing = pc.or_(missing, pc.equal(trimmed, marker))
    return pc.if_else(missing, pa.scalar(None, pa.string()), trimmed)


def us_to_ns(values: pa.Array | pa.ChunkedArray, exact: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Parse µs text to int64 ns.

    Returns (ns, present, bad): ns is 0 where a value is missing or bad; `present` marks values that parsed;
    `bad` marks values that were there but are not numbers (the caller decides whether that is an error).
    Durations (`exact=False`) small enough for float64 to hold all their ns digits take the fast float path;
    epoch times (`exact=True`) are parsed as digits.
    """
    text = clean_text(values)
    valid = pc.is_valid(text).to_numpy(zero_copy_only=False)
    if not exact:
        try:
            x = pc.cast(text, pa.float64()).to_numpy(zero_copy_only=False)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            x = None
        if x is not None:
            finite = np.isfinite(x)
            if (finite == valid).all() and np.abs(x[finite], dtype=np.float64).max(initial=0.0) < _FLOAT_SAFE_US:
                ns = np.zeros(len(x), np.int64)
                ns[finite] = np.rint(x[finite] * 1000.0).astype(np.int64)
                return ns, valid.copy(), np.zeros(len(x), bool)
    return _digits_to_ns(text, valid)


def _digits_to_ns(text: pa.Array, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """int part and up to three decimals as one digit string (".380" -> "380"), cast to int64 in one pass."""
    simple = pc.fill_null(pc.match_substring_regex(text, _SIMPLE), False).to_numpy(zero_copy_only=False)
    dot = pc.find_substring(text, ".").to_numpy(zero_copy_only=False)
    length = pc.utf8_length(text).to_numpy(zero_copy_only=False)
    decimals = np.where(dot < 0, 0, length - dot - 1)
    decimals = np.nan_to_num(decimals).astype(np.int64)
    fast = simple & (decimals <= 3)
    digits = pc.binary_join_element_wise(
        pc.replace_substring(text, ".", ""), pc.take(_PAD, pa.array(np.clip(decimals, 0, 3))), ""
    )
    digits = pc.if_else(pa.array(fast), digits, "0")
    present = fast.copy()
    try:
        ns = np.array(pc.cast(digits, pa.int64()).to_numpy(zero_copy_only=False), np.int64)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # overflow: everything through Decimal
        ns = np.zeros(len(text), np.int64)
        present[:] = False
    slow = valid & ~present
    bad = np.zeros(len(text), bool)
    if slow.any():  # > 3 decimals, exponents, '+': exact but one value at a time
        raw = text.to_pylist()
        for i in np.flatnonzero(slow).tolist():
            value = _decimal_ns(raw[i])
            if value is None:
                bad[i] = True
            else:
                ns[i], present[i] = value, True
    ns[~present] = 0
    return ns, present, bad


def _decimal_ns(text: str) -> int | None:
    try:
        value = Decimal(text) * 1000
    except (ArithmeticError, ValueError):  # InvalidOperation, and Overflow for exponents like 1e999999
        return None
    if not value.is_finite() or abs(value) > _MAX_ABS_NS:
        return None
    return int(value.to_integral_value(rounding=ROUND_HALF_UP))


def floats_to_ns(values: list[object] | np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """JSON numbers (µs, small: durations) -> ns; strings go through `us_to_ns`. Same triple as `us_to_ns`.
    NaN counts as missing (JSON has no NaN: the native scanner writes it for an absent value)."""
    n = len(values)
    if isinstance(values, np.ndarray) and values.dtype == np.float64:  # the native scanner's column: no Arrow trip
        present = np.abs(values) < _MAX_ABS_NS / 1000  # False for NaN (absent) and infinities
        ns = np.zeros(n, np.int64)
        ns[present] = np.rint(values[present] * 1000.0).astype(np.int64)
        return ns, present, ~present & ~np.isnan(values)
    try:
        arr = pa.array(values, pa.float64(), from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        texts = [_as_text(v) for v in values]
        return us_to_ns(pa.array(texts, pa.string()))
    x = arr.to_numpy(zero_copy_only=False)
    present = np.isfinite(x) & (np.abs(np.nan_to_num(x)) < _MAX_ABS_NS / 1000)
    bad = ~present & ~np.asarray(pc.is_null(arr).to_numpy(zero_copy_only=False), bool)
    ns = np.zeros(n, np.int64)
    ns[present] = np.rint(x[present] * 1000.0).astype(np.int64)
    return ns, present, bad


def _as_text(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):  # a JSON true/false is not a time
        return "x"
    if isinstance(value, int | float | str):
        return repr(value) if isinstance(value, float) else str(value)
    return "x"
