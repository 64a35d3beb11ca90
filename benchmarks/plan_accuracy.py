"""How well ``plan --from-run`` predicts a campaign's wall time on this machine.

For one and for two server instances: a 128 s pilot (DeepClean, H1+L1, 3 witnesses, 2048 Hz,
32 windows per second, 1 server x 2 clients, run by ``run-local``), then ``plan`` from that
pilot for a 1024 s campaign, then the campaign at the plan's layout. Prints the plan's wall
time and stages, the campaign's, and their ratio (taken in one run, so the machine's speed
cancels; the load of other work on the machine does not, which is why this is a benchmark
and not a test). Issue #29's bound was |plan / campaign - 1| <= 0.25.

Usage: .venv/bin/python benchmarks/plan_accuracy.py [--work DIR]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from offline_iaas.bench.provenance import source_commit
from offline_iaas.config import CampaignConfig, load_config, override_config
from offline_iaas.data.synth import write_synthetic_dataset
from offline_iaas.repository.export import export_repository
from offline_iaas.rundir import RunDir
from offline_iaas.sizing.pilot import read_pilot
from offline_iaas.sizing.plan import plan_from_run
from offline_iaas.workflow.local import run_local
from offline_iaas.workflow.make_dag import make_dag

REPOSITORY = Path(__file__).resolve().parents[1]
PILOT_SECONDS = 128
CAMPAIGN_SECONDS = 1024
RATE_HZ = 2048


def _stream(root: Path) -> list[str]:
    """DeepClean at 32 windows per second: streaming, not start-up, is most of a campaign."""
    from tests.helpers import WITNESSES

    return ['model.mode="deepclean"', f"data.witnesses={WITNESSES}",
            "model.inference_rate=32", "model.batch_size=32",
            f'model.repository="{root / "model-repository"}"']


def _campaign(root: Path, name: str, overrides: list[str]) -> CampaignConfig:
    """The config at ``overrides``, its repository exported, its DAG run."""
    config = load_config(root / "campaign.toml", [*_stream(root), *overrides])
    config = override_config(config, [f'model.repository="{root / name / "repository"}"'])
    export_repository(config, root / "weights")
    run = RunDir(root / name / "run")
    make_dag(config, run)
    run_local(run)
    return config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, help="work directory (default: a temporary one)")
    args = parser.parse_args()
    sys.path.insert(0, str(REPOSITORY))  # the tests' small campaign and untrained weights
    from tests.helpers import SMALL_CAMPAIGN, untrained_weights

    root = args.work or Path(tempfile.mkdtemp(prefix="plan-accuracy-"))
    root.mkdir(parents=True, exist_ok=True)
    (root / "campaign.toml").write_text(
        SMALL_CAMPAIGN.replace("duration = 64", f"duration = {CAMPAIGN_SECONDS}")
        .replace("file_duration = 16", "file_duration = 128")
        .replace("sample_rate = 256", f"sample_rate = {RATE_HZ}"))
    write_synthetic_dataset(load_config(root / "campaign.toml", _stream(root)))
    untrained_weights(root / "weights")
    print(f"plan accuracy at {source_commit()} on {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f}")
    for instances in (1, 2):
        layout = [f"server.instances={instances}", "layout.servers=1",
                  "layout.clients_per_server=2"]
        _campaign(root, f"pilot-{instances}", [*layout, f"data.duration={PILOT_SECONDS}"])
        pilot = read_pilot(RunDir(root / f"pilot-{instances}" / "run"))
        wanted = load_config(root / "campaign.toml", [*_stream(root), *layout])
        plan = plan_from_run(wanted, 10.0, pilot)  # a loose deadline: one server
        _campaign(root, f"campaign-{instances}", [*layout, *plan.overrides()])
        ran = read_pilot(RunDir(root / f"campaign-{instances}" / "run"))
        stages = ", ".join(f"{k.removesuffix('_seconds')} {v:.1f}" for k, v in plan.stages.items())
        print(f"{instances} instance(s): plan {plan.wall_seconds:.1f} s ({stages}); campaign "
              f"{ran.run_seconds:.1f} s (start {ran.start_seconds:.1f}, streaming "
              f"{ran.streaming_seconds:.1f}, merge {ran.merge_seconds:.1f}); plan/campaign "
              f"{plan.wall_seconds / ran.run_seconds:.3f}")


if __name__ == "__main__":
    main()
