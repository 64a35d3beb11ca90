"""Values read from a JSON file, judged and named alike by every reader of one (the injection
lists, ``synth.json``, a weights directory's training summary): JSON has one kind of number,
which Python reads as an int, a float or (``NaN``, ``Infinity``) a non-finite float, and a
boolean, which Python counts as an int."""

from __future__ import annotations

import math
from typing import Any


def finite_number(value: Any) -> bool:
    """Whether ``value`` is a finite JSON number (not a boolean, not NaN or Infinity)."""
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value))


def json_kind(value: Any) -> str:
    """What JSON ``value`` is, in words (``a number``, ``null``, ...)."""
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string",
            list: "a list", dict: "an object"}.get(type(value), type(value).__name__)
