"""Shared fixtures: small campaign configs written to temporary directories; the package's
log lines; the fault injection hook every node started by a test inherits
(``offline_iaas.hooks``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from offline_iaas.hooks import HOOK_ENV
from tests.helpers import SMALL_CAMPAIGN, captured_log

# Nodes fail where RUN/faults.json says (tests/faults/inject.py); without it nothing happens.
os.environ[HOOK_ENV] = f"{Path(__file__).parent / 'faults' / 'inject.py'}:inject"


@pytest.fixture
def small_config_file(tmp_path: Path) -> Path:
    path = tmp_path / "campaign.toml"
    path.write_text(SMALL_CAMPAIGN)
    return path


@pytest.fixture
def log_lines() -> Iterator[list[str]]:
    """The package's log lines (info and above) while the test runs, as the CLI prints them."""
    with captured_log() as lines:
        yield lines
