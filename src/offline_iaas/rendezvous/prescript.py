"""``offline-iaas prescript``: a client node's PRE script, where workers share no filesystem.

DAGMan runs it on the access point before each attempt of a client job::

    SCRIPT DEFER 75 30 PRE client3 /path/offline-iaas prescript --run-dir RUN --node $JOB

It looks up the client's server in the schedd (``rendezvous/job_ads.py``): the server job's ad,
found by ``OfflineIaasRun``/``OfflineIaasNode``, holds ``OfflineIaasAddress`` once Triton is
ready. An address counts only if the job is running and the address was set by its current
start (epoch = ``NumJobStarts``). The script writes every live server's address to
``RUN/servers/<server>.json`` — the files a client reads on a shared filesystem — which the
client's submit file transfers with the job (``servers/``), so that the client can fail over
to another server. Until its own server's address is known it exits ``DEFER_EXIT``, and
DAGMan runs it again ``DEFER_SECONDS`` later without counting a failure; after
``client.failover_seconds`` of that, another live server's address is enough.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from offline_iaas import records
from offline_iaas.binding import read_bound_run
from offline_iaas.bounded_read import read_text_or
from offline_iaas.errors import RunError
from offline_iaas.job_specs import read_client_job
from offline_iaas.rendezvous import addresses
from offline_iaas.rendezvous.job_ads import ADDRESS_ATTRIBUTE, RUNNING, JobAds, QueuedAd, job_ads
from offline_iaas.rundir import RunDir

logger = logging.getLogger(__name__)

DEFER_EXIT = 75
"""Exit code meaning "not yet, run me again" (``SCRIPT DEFER``); EX_TEMPFAIL."""
DEFER_SECONDS = 30
"""Seconds DAGMan waits before running a deferred PRE script again."""


def current_address(ads: list[QueuedAd], node: str) -> addresses.ServerAddress | None:
    """The address of a running server job's current start, from its job ads."""
    best = None
    for ad in ads:
        if ad.job_status != RUNNING or ad.address is None:
            continue
        try:
            address = addresses.parse_address(ad.address,
                                              Path(f"job ad of {node}: {ADDRESS_ATTRIBUTE}"))
        except RunError:  # another program's attribute, or an older offline-iaas's
            continue
        if ad.job_starts is not None and address.epoch != ad.job_starts:
            continue  # set by an earlier start of a restarted job
        if address.node == node and (best is None or address.epoch > best.epoch):
            best = address
    return best


def resolve_servers(
    run: RunDir, node: str, ads: JobAds
) -> tuple[addresses.ServerAddress | None, list[addresses.ServerAddress]]:
    """Write the address of every live server of the run into the run directory (a client
    may fail over to any of them); return client ``node``'s own server's and the others'.

    A server that published none (or is gone) has its stale file removed.
    """
    info = records.read_run_info(run)
    run_id = info.run_id
    server = read_client_job(run, node).server
    names = list(info.servers) or [server]
    own, others = None, []
    for name in sorted(set(names) | {server}):
        found = ads.find(run_id, name)
        refusals = [ad.refusal for ad in found if ad.refusal]
        if refusals:  # the client reads it, and fails with the server's reason
            addresses.publish_refusal(run, name, refusals[-1])
        else:
            run.refusal(name).unlink(missing_ok=True)
        address = current_address(found, name)
        if address is None:
            run.address(name).unlink(missing_ok=True)
            continue
        addresses.publish_address(run, address)
        if name == server:
            own = address
        else:
            others.append(address)
    return own, others


def prescript(run: RunDir, node: str, ads: JobAds | None = None,
              now: float | None = None) -> bool:
    """Run the PRE script of client ``node``: True once its server's address is written, or,
    after ``client.failover_seconds`` of waiting for it, once another server's is (the client
    then fails over at once: its own server's file is absent). Refuses a run that is not
    make-dag's plan (``binding.read_bound_run``) before anything is resolved."""
    config, _ = read_bound_run(run)
    ads = job_ads() if ads is None else ads
    now = time.time() if now is None else now
    own, others = resolve_servers(run, node, ads)
    waiting = run.node_log(node, "pre-waiting-since")
    server = read_client_job(run, node).server
    if own is None and addresses.read_refusal(run, str(server)):
        logger.warning(f"{node}: {server} refused to serve; the client will say why")
        return True
    if own is not None:
        waiting.unlink(missing_ok=True)
        logger.info(f"{node}: {own.node} is at {own.grpc_url} (epoch {own.epoch})")
        return True
    if not waiting.exists():
        waiting.parent.mkdir(parents=True, exist_ok=True)
        waiting.write_text(f"{now}\n")
    waited = now - float(read_text_or(waiting, RunError))
    failover = config.client.failover_seconds if others else 0.0
    if others and 0 < failover <= waited:
        names = ", ".join(a.node for a in others)
        logger.warning(f"{node}: its server has published no address in {waited:.0f} s; "
                       f"failing over to a live one ({names})")
        return True
    logger.info(f"{node}: its server has published no address yet; deferring")
    return False
