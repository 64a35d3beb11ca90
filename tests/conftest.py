"""Shared fixtures: small campaign configs written to temporary directories."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import SMALL_CAMPAIGN


@pytest.fixture
def small_config_file(tmp_path: Path) -> Path:
    path = tmp_path / "campaign.toml"
    path.write_text(SMALL_CAMPAIGN)
    return path
