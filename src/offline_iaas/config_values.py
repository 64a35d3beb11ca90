"""TOML values and the config's dataclass fields: ``--set`` overrides, typed coercion, writing.

``config.py`` holds the sections; this module turns plain TOML data into their fields (each
value checked against the field's type, relative paths taken from the config file's
directory) and back.
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
import types
import typing
from pathlib import Path
from typing import Any

from offline_iaas.errors import ConfigError


def plain_value(value: Any) -> Any:
    """A field's value as TOML holds it (paths as strings, tuples as lists)."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return list(value)
    return value


def parse_override(text: str) -> tuple[str, str, Any]:
    """Split ``section.key=value`` into its parts, parsing the value as TOML."""
    if "=" not in text or "." not in text.split("=", 1)[0]:
        raise ConfigError(f"override {text!r} is not of the form section.key=value")
    dotted, raw = text.split("=", 1)
    section, key = dotted.strip().split(".", 1)
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return section, key.strip(), value


def apply_overrides(raw: dict[str, Any], overrides: list[str] | tuple[str, ...], path: Path
                    ) -> dict[str, Any]:
    """``raw`` (the sections of a config file, ``path``) with ``section.key=value`` applied."""
    for text in overrides:
        section, key, value = parse_override(text)
        raw.setdefault(section, {})
        if not isinstance(raw[section], dict):
            raise ConfigError(f"{path}: override {text!r}: [{section}] is not a section")
        raw[section][key] = value
    return raw


def build_section(cls: type, name: str, values: dict, path: Path, base: Path) -> Any:
    """Section ``name`` (dataclass ``cls``) from its TOML values; ConfigError naming the key."""
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in dataclasses.fields(cls)}
    for key in values:
        if key not in known:
            raise ConfigError(
                f"{path}: unknown key '{name}.{key}' (known in [{name}]: {', '.join(known)})"
            )
    kwargs = {}
    for key, f in known.items():
        if key not in values:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ConfigError(f"{path}: missing required key '{name}.{key}'")
            continue
        kwargs[key] = coerce(values[key], hints[key], f"{name}.{key}", path, base)
    return cls(**kwargs)


def coerce(value: Any, hint: Any, key: str, path: Path, base: Path) -> Any:
    """``value`` as the type ``hint`` of field ``key``; ConfigError when it is not one."""
    def bad(expected: str) -> ConfigError:
        return ConfigError(f"{path}: '{key}' must be {expected}, got {value!r}")

    if typing.get_origin(hint) in (types.UnionType, typing.Union):
        inner = [h for h in typing.get_args(hint) if h is not type(None)]
        return coerce(value, inner[0], key, path, base)
    if hint is Path:
        if not isinstance(value, str) or not value:
            raise bad("a path string")
        p = Path(value).expanduser()
        return p if p.is_absolute() else (base / p)
    if hint is bool:
        if not isinstance(value, bool):
            raise bad("true or false")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad("an integer")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise bad("a number")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise bad("a string")
        return value
    if typing.get_origin(hint) is tuple or isinstance(hint, types.GenericAlias):
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise bad("a list of strings")
        return tuple(value)
    raise TypeError(f"unsupported config type {hint!r} for {key}")  # programming error


def toml_value(value: Any) -> str:
    """A plain value as TOML text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(str(value))
