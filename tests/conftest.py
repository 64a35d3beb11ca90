"""Shared fixtures: small campaign configs written to temporary directories."""

from __future__ import annotations

from pathlib import Path

import pytest

SMALL_CAMPAIGN = """
[data]
frames = "frames"
channels = ["H1:GDS-CALIB_STRAIN", "L1:GDS-CALIB_STRAIN"]
start = 1262304000
duration = 64
sample_rate = 256

[synth]
file_duration = 16
frame_sample_rate = 256
injections = 1

[model]
repository = "model-repository"
kernel_seconds = 1.0
inference_rate = 4
batch_size = 8

[layout]
servers = 1
clients_per_server = 2
"""


@pytest.fixture
def small_config_file(tmp_path: Path) -> Path:
    path = tmp_path / "campaign.toml"
    path.write_text(SMALL_CAMPAIGN)
    return path
