"""``offline-iaas prescript``: a client node's PRE script, where workers share no filesystem.

DAGMan runs it on the access point before each attempt of a client job::

    SCRIPT DEFER 75 30 PRE client3 /path/offline-iaas prescript --run-dir RUN --node $JOB

It looks up the client's server in the schedd (``rendezvous/job_ads.py``): the server job's ad,
found by ``OfflineIaasRun``/``OfflineIaasNode``, holds ``OfflineIaasAddress`` once Triton is
ready. An address counts only if the job is running and the address was set by its current
start (epoch = ``NumJobStarts``). The script then writes it to ``RUN/servers/<server>.json``
— the file a client reads on a shared filesystem — which the client's submit file transfers
with the job. Until the address is known it exits ``DEFER_EXIT``, and DAGMan runs it again
``DEFER_SECONDS`` later without counting a failure.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from offline_iaas.errors import RunError
from offline_iaas.rendezvous import addresses
from offline_iaas.rendezvous.job_ads import ADDRESS_ATTRIBUTE, RUNNING, JobAds, job_ads
from offline_iaas.rundir import RunDir, read_record

logger = logging.getLogger(__name__)

DEFER_EXIT = 75
"""Exit code meaning "not yet, run me again" (``SCRIPT DEFER``); EX_TEMPFAIL."""
DEFER_SECONDS = 30
"""Seconds DAGMan waits before running a deferred PRE script again."""


def current_address(ads: list[dict[str, Any]], node: str) -> addresses.ServerAddress | None:
    """The address of a running server job's current start, from its job ads."""
    best = None
    for ad in ads:
        text = ad.get(ADDRESS_ATTRIBUTE)
        if ad.get("JobStatus") != RUNNING or not isinstance(text, str):
            continue
        try:
            address = addresses.ServerAddress(**json.loads(text))
        except (ValueError, TypeError):
            continue
        starts = ad.get("NumJobStarts")
        if isinstance(starts, int) and address.epoch != starts:
            continue  # set by an earlier start of a restarted job
        if address.node == node and (best is None or address.epoch > best.epoch):
            best = address
    return best


def resolve_server(run_dir: Path, node: str, ads: JobAds) -> addresses.ServerAddress | None:
    """Write the address of client ``node``'s server into the run directory, if known.

    Returns
    -------
    The address written to ``servers/<server>.json``, or None if the server has not
    published one yet.
    """
    run_dir = Path(run_dir).absolute()
    run = RunDir(run_dir)
    run_id = str(read_record(run.run_info).get("run_id", ""))
    server = read_record(run.job(node)).get("server")
    if not isinstance(server, str) or not server:
        raise RunError(f"{run.job(node)}: names no server")
    address = current_address(ads.find(run_id, server), server)
    if address is not None:
        addresses.publish_address(run_dir, address)
    return address


def prescript(run_dir: Path, node: str, ads: JobAds | None = None) -> bool:
    """Run the PRE script of client ``node``: True once its server's address is written."""
    ads = job_ads() if ads is None else ads
    address = resolve_server(run_dir, node, ads)
    if address is None:
        logger.info(f"{node}: its server has published no address yet; deferring")
        return False
    logger.info(f"{node}: {address.node} is at {address.grpc_url} (epoch {address.epoch})")
    return True
