"""Argument types the command lines share: whole numbers within the signed 64-bit range every
entry accepts (core/values.py), refused by argparse before anything runs."""

from __future__ import annotations

import argparse

from .values import INT64_MAX, INT64_MIN


def _whole(text: str, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"must be at least {least}, not {value}")
    if value > INT64_MAX:
        raise argparse.ArgumentTypeError(f"must be at most {INT64_MAX} (2^63 - 1), not {value}")
    return value


def int64(text: str) -> int:
    """A whole number within the signed 64-bit range, for argparse."""
    return _whole(text, INT64_MIN)


def count(text: str) -> int:
    """A whole number of at least 0 (a seed, a sequence number), for argparse."""
    return _whole(text, 0)


def positive_int(text: str) -> int:
    """A whole number of at least 1, for argparse."""
    return _whole(text, 1)
