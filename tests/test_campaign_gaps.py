"""End to end with data as analysts have it: gaps, science segments, a gwdatafind server.

Real GWF frames, real tritonservers, the written DAG executed by run-local; the merged output
must equal the in-process reference on every stretch and hold no samples inside gaps.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from offline_iaas.config import CampaignConfig, load_config
from offline_iaas.data.synth import write_synthetic_dataset
from offline_iaas.merge.output import compare_outputs, read_campaign
from offline_iaas.merge.reference import run_reference
from offline_iaas.repository.export import export_repository
from tests.datafind_server import running_datafind_server
from tests.helpers import SMALL_CAMPAIGN, TOLERANCE, run_dag
from tests.oracle import run_problems

pytestmark = pytest.mark.slow

START = 1262304000


def prepared(root: Path, overrides: list[str]) -> CampaignConfig:
    root.mkdir(parents=True, exist_ok=True)
    (root / "campaign.toml").write_text(SMALL_CAMPAIGN)
    config = load_config(root / "campaign.toml", ["synth.file_duration=8", *overrides])
    write_synthetic_dataset(config)
    return config


def run_campaign(config: CampaignConfig, root: Path) -> Path:
    export_repository(config)
    run_dir = run_dag(config, root / "run")
    reference, _ = run_reference(config, root / "reference.h5")
    comparison = compare_outputs(run_dir / "output" / "campaign.h5", reference)
    assert comparison.passes(TOLERANCE), comparison.describe()
    return run_dir


def test_gaps_and_science_segments(tmp_path: Path) -> None:
    segment_file = tmp_path / "science.txt"
    segment_file.write_text(
        "# three science segments\n"
        f"{START} {START + 30}\n{START + 34} {START + 52}\n{START + 54} {START + 64}\n"
    )
    config = prepared(
        tmp_path,
        [f'data.segments="{segment_file}"', "layout.servers=2", "layout.clients_per_server=2"],
    )
    frames = config.data.frames
    (frames / f"H-H1_SYNTH-{START + 16}-8.gwf").unlink()  # gap 1: H1 missing 16-24
    (frames / f"L-L1_SYNTH-{START + 40}-8.gwf").unlink()  # gap 2: L1 missing 40-48
    (frames / "frames.lcf").unlink()  # the directory, not the stale cache, is the source

    run_dir = run_campaign(config, tmp_path)
    assert run_problems(run_dir) == []  # right, not only equal: the oracle's own stretches
    gaps = [(START + 16, START + 24), (START + 30, START + 34), (START + 40, START + 48),
            (START + 52, START + 54)]
    series = read_campaign(run_dir / "output" / "campaign.h5")
    assert len(series) == 5  # [0,16) [24,30) [34,40) [48,52) [54,64)
    for ts in series:
        first = ts.t0.value - 1.0  # the first window starts one kernel before its stamp
        last = ts.times[-1].value
        for gap_start, gap_end in gaps:
            assert last <= gap_start or first >= gap_end, (ts.t0, gap_start)
    # no client streams across a gap: every piece lies inside one stretch
    pieces = [piece for spec in sorted((run_dir / "jobs").glob("client*.json"))
              for piece in json.loads(spec.read_text())["pieces"]]
    assert len(pieces) >= len(series)  # every stretch streamed by some piece
    for piece in pieces:
        assert piece["stretch_gps_start"] <= piece["gps_start"]
        assert piece["gps_end"] <= piece["stretch_gps_end"]


def test_campaign_discovered_through_gwdatafind(tmp_path: Path) -> None:
    config = prepared(tmp_path, [])
    with running_datafind_server(config.data.frames) as url:
        discovered = tmp_path / "datafind.toml"
        discovered.write_text(
            SMALL_CAMPAIGN.replace(
                'frames = "frames"',
                f'datafind_server = "{url}"\nframetypes = ["H1_SYNTH", "L1_SYNTH"]',
            )
        )
        config = load_config(discovered, ["synth.file_duration=8"])
        assert config.data.frames is None
        run_campaign(config, tmp_path)
