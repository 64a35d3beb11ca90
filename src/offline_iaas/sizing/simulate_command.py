"""``offline-iaas plan --simulate``: the command's part that replays a planned run (the
simulation itself is ``sizing/simulate.py``)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging

from offline_iaas.binding import check_run_directory
from offline_iaas.config import load_config
from offline_iaas.errors import ConfigError
from offline_iaas.rundir import RunDir
from offline_iaas.sizing.pilot import read_pilot
from offline_iaas.sizing.replay import MAX_REPLICATIONS, FailureModel
from offline_iaas.sizing.simulate import simulate_run

logger = logging.getLogger("offline_iaas.cli")


def simulate_command(args: argparse.Namespace, run: RunDir, pilot: RunDir | None) -> None:
    """``plan --simulate RUN --from-run PILOT``: replay ``run``'s DAG with the ``pilot`` run's
    rates and the failure model of ``args`` (``sizing/simulate.py``); its makespan and stages
    as log lines, or JSON with ``--json``."""
    if pilot is None:
        raise ConfigError("plan --simulate needs --from-run PILOT (the rates to replay with)")
    if not 0 <= args.failure_rate <= 1:  # NaN too
        raise ConfigError(f"--failure-rate must be in [0, 1], not {args.failure_rate:g}")
    if args.replications < 1:
        raise ConfigError(f"--replications must be at least 1, not {args.replications}")
    if args.replications > MAX_REPLICATIONS:
        raise ConfigError(f"--replications must be at most {MAX_REPLICATIONS:,} (each replays "
                          f"the whole DAG), not {args.replications:,}")
    check_run_directory(run)
    config = load_config(run.config)
    failures = FailureModel(failure_rate=args.failure_rate,
                            never_starting_servers=frozenset(args.never_start),
                            failover_seconds=config.client.failover_seconds, seed=args.seed,
                            replications=args.replications)
    try:
        result = simulate_run(run, read_pilot(pilot), failures)
    except ValueError as err:
        raise ConfigError(f"plan --simulate {args.simulate}: {err}") from None
    if args.json:
        print(json.dumps({"makespan_seconds": result.makespan_seconds,
                          "p90_seconds": result.p90_seconds, "finished": result.finished,
                          "stages": dataclasses.asdict(result.stages),
                          "critical_path": list(result.critical_path)}, indent=2))
        return
    for line in result.describe():
        logger.info(f"plan: simulate: {line}")
