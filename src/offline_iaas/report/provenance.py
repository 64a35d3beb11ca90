"""What produced a campaign: software versions, the model repository's manifest."""

from __future__ import annotations

import platform
from importlib import metadata
from typing import Any

SOFTWARE: tuple[str, ...] = (
    "offline-iaas", "tritonclient", "onnxruntime", "numpy", "gwpy", "h5py", "matplotlib",
)
"""Distributions whose versions the report lists (besides Python)."""


def software_versions() -> dict[str, str]:
    """Installed versions of ``SOFTWARE`` and Python (``not installed`` when absent)."""
    versions = {"python": platform.python_version()}
    for name in SOFTWARE:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def manifest_rows(manifest: dict[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    """The manifest flattened for a table: ``versions.bbhnet``, lists joined by commas."""
    rows: list[tuple[str, str]] = []
    for key, value in manifest.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            rows += manifest_rows(value, f"{name}.")
        elif isinstance(value, list):
            rows.append((name, ", ".join(str(v) for v in value)))
        else:
            rows.append((name, str(value)))
    return rows
