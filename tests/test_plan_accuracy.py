"""``plan --from-run`` sizes what runs: a pilot, then the campaign at the plan's layout, with one
server instance and with two, on this machine; the plan's wall time is within 25 % of the
campaign's (a ratio taken in one run, so the machine's speed cancels)."""

from __future__ import annotations

from pathlib import Path

import pytest

from offline_iaas.config import CampaignConfig, load_config, override_config
from offline_iaas.data.synth import write_synthetic_dataset
from offline_iaas.repository.export import export_repository
from offline_iaas.rundir import RunDir
from offline_iaas.sizing.pilot import read_pilot
from offline_iaas.sizing.plan import plan_from_run
from offline_iaas.workflow.local import run_local
from offline_iaas.workflow.make_dag import make_dag
from tests.helpers import SMALL_CAMPAIGN, WITNESSES, processes_mentioning, untrained_weights

pytestmark = pytest.mark.slow

PILOT_SECONDS = 128
CAMPAIGN_SECONDS = 1024
RATE_HZ = 2048
TOLERANCE = 0.25
"""The issue's bound on |plan / campaign - 1|."""
STREAMING_SHARE = 0.2
"""Streaming is at least this share of the campaign, so the ratio tests the measured rates,
not the start-up and merge constants alone: 35-47 % measured on an idle 2-core machine, 29 %
in a CI run whose other work slowed the servers' start (CI of 2026-11-25)."""


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """DeepClean frames (H1+L1, 3 witnesses, 2048 Hz) for the campaign's span, and weights."""
    root = tmp_path_factory.mktemp("plan-accuracy")
    (root / "campaign.toml").write_text(
        SMALL_CAMPAIGN.replace("duration = 64", f"duration = {CAMPAIGN_SECONDS}")
        .replace("file_duration = 16", "file_duration = 128")
        .replace("sample_rate = 256", f"sample_rate = {RATE_HZ}"))
    config = load_config(root / "campaign.toml", _stream(root))
    write_synthetic_dataset(config)
    untrained_weights(root / "weights")
    return root


def _stream(root: Path) -> list[str]:
    """DeepClean at 32 windows per second: streaming, not start-up, is most of a campaign."""
    return ["model.mode=\"deepclean\"", f"data.witnesses={WITNESSES}",
            "model.inference_rate=32", "model.batch_size=32",
            f'model.repository="{root / "model-repository"}"']


def _campaign(root: Path, name: str, overrides: list[str]) -> CampaignConfig:
    """The config at ``overrides``, its repository exported, its DAG run; the config."""
    config = load_config(root / "campaign.toml", [*_stream(root), *overrides])
    config = override_config(config, [f'model.repository="{root / name / "repository"}"'])
    export_repository(config, root / "weights")
    run = RunDir(root / name / "run")
    make_dag(config, run)
    try:
        run_local(run)
    finally:
        assert processes_mentioning(str(run.path)) == []
    return config


@pytest.mark.parametrize("instances", [1, 2])
def test_plan_from_a_pilot_predicts_the_campaigns_wall_time(dataset: Path,
                                                            instances: int) -> None:
    layout = [f"server.instances={instances}", "layout.servers=1",
              "layout.clients_per_server=2"]
    _campaign(dataset, f"pilot-{instances}", [*layout, f"data.duration={PILOT_SECONDS}"])
    pilot = read_pilot(RunDir(dataset / f"pilot-{instances}" / "run"))
    wanted = load_config(dataset / "campaign.toml", [*_stream(dataset), *layout])
    plan = plan_from_run(wanted, 10.0, pilot)  # a loose deadline: one server
    assert (plan.servers, plan.instances, plan.clients_per_server) == (1, instances, 2)
    _campaign(dataset, f"campaign-{instances}", [*layout, *plan.overrides()])
    ran = read_pilot(RunDir(dataset / f"campaign-{instances}" / "run"))
    ratio = plan.wall_seconds / ran.run_seconds
    print(f"{instances} instance(s): plan {plan.wall_seconds:.1f} s {plan.stages}, campaign "
          f"{ran.run_seconds:.1f} s: start {ran.start_seconds:.1f}, streaming "
          f"{ran.streaming_seconds:.1f}, merge {ran.merge_seconds:.1f}; ratio {ratio:.3f}")
    # streaming must be a large part of the wall time, or the check would test the constants
    assert ran.streaming_seconds > STREAMING_SHARE * ran.run_seconds, ran
    assert abs(ratio - 1) <= TOLERANCE, (
        f"{instances} instance(s): plan {plan.wall_seconds:.1f} s, campaign "
        f"{ran.run_seconds:.1f} s (start {ran.start_seconds:.1f}, streaming "
        f"{ran.streaming_seconds:.1f}, merge {ran.merge_seconds:.1f}); plan stages "
        f"{plan.stages}")
