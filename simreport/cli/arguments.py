"""The command line's argument types, each written once and refused by argparse before anything
runs: whole numbers within the signed 64-bit range every entry accepts (core/values.py), and the
numbers of the statistics (probabilities, effect sizes, correlations)."""

from __future__ import annotations

import argparse
import math

from ..core.errors import InputError
from ..core.values import INT64_MAX, INT64_MIN


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


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}") from None


def probability(text: str) -> float:
    """A number strictly between 0 and 1 (a power, an α), for argparse."""
    value = _number(text)
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"must lie between 0 and 1, not {text}")
    return value


def effect_size(text: str) -> float:
    """A positive finite standardised effect |d|, for argparse."""
    value = _number(text)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive finite |d|, not {text}")
    return value


def correlation(text: str) -> float:
    """A correlation in [-1, 1) (1 would make paired differences vanish), for argparse."""
    value = _number(text)
    if not -1.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"must lie in [-1, 1), not {text}")
    return value


def version_ref(ref: str, *, path: str, example: str) -> tuple[str, str]:
    """`NAME@VERSION` split at its last `@`; InputError naming `path` and an `example` when
    either side is empty."""
    name, sep, version = ref.rpartition("@")
    if not sep or not name or not version:
        raise InputError(f"{ref!r} names no version", path=path, expected=f"e.g. {example}")
    return name, version
