"""Server addresses in job ads, for pools whose workers share no filesystem.

A server job sets ``OfflineIaasAddress`` in its own job ad (``condor_chirp set_job_attr``, here
through ``htcondor2.htchirp``); each client node's PRE script, on the access point, finds it
with a schedd query. Both calls sit behind ``JobAds``:

* ``HTCondorJobAds``: chirp from inside the job, ``htcondor2.Schedd().query`` on the access point;
* ``FileJobAds``: a JSON file standing in for the schedd, for tests and for trying the
  no-shared-filesystem path on one machine. ``OFFLINE_IAAS_FAKE_JOB_ADS=<file>`` selects it.

Ads are found by ``OfflineIaasRun`` (the run directory's ``run_id``) and ``OfflineIaasNode``,
which every submit file of the DAG sets.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from offline_iaas.atomic import write_text_atomic
from offline_iaas.bounded_read import read_text_or
from offline_iaas.errors import ServerError

ADDRESS_ATTRIBUTE = "OfflineIaasAddress"
"""Job ad attribute with the server's address (the JSON of ``rendezvous.ServerAddress``)."""
REFUSAL_ATTRIBUTE = "OfflineIaasRefusal"
"""Job ad attribute with why a server refused to serve (its repository)."""
FAKE_ENV = "OFFLINE_IAAS_FAKE_JOB_ADS"
"""Environment variable naming the ``FileJobAds`` file; unset on a real pool."""
RUNNING = 2
"""``JobStatus`` of a running job."""
QUERIED = ("JobStatus", "NumJobStarts", ADDRESS_ATTRIBUTE, REFUSAL_ATTRIBUTE)

RUN_ATTRIBUTE = "OfflineIaasRun"
"""Job ad attribute holding the run directory's ``run_id`` (every job of the DAG)."""
NODE_ATTRIBUTE = "OfflineIaasNode"
"""Job ad attribute holding the DAG node name."""


@dataclass(frozen=True)
class QueuedAd:
    """A server job's ad as the access point's schedd query returns it (``QUERIED``); an
    attribute the job has not set, or holds a value of another type, is None."""

    job_status: int | None
    """``JobStatus`` (``RUNNING``: 2)."""
    job_starts: int | None
    """``NumJobStarts``: the epoch of the job's current start."""
    address: str | None
    """``OfflineIaasAddress``: the JSON of the server's address, once Triton is ready."""
    refusal: str | None
    """``OfflineIaasRefusal``: why the server refused to serve."""

    @classmethod
    def from_ad(cls, ad: Mapping[str, Any]) -> QueuedAd:
        """The one place an ad's attributes are read (a schedd's ClassAd or the stand-in
        file's): another program's value of another type reads as None."""

        def of(name: str, kind: type) -> Any:
            value = ad.get(name)
            return value if isinstance(value, kind) and not isinstance(value, bool) else None

        return cls(of("JobStatus", int), of("NumJobStarts", int), of(ADDRESS_ATTRIBUTE, str),
                   of(REFUSAL_ATTRIBUTE, str))


class JobAds(Protocol):
    """The two sides of the job-ad rendezvous."""

    def set_own(self, run_id: str, node: str, name: str, value: str | int | None) -> None:
        """From inside a job: set (None: remove) an attribute of the job's own ad."""

    def get_own(self, run_id: str, node: str, name: str) -> str | int | None:
        """From inside a job: an attribute of its own ad (None when undefined)."""

    def find(self, run_id: str, node: str) -> list[QueuedAd]:
        """On the access point: the queued ads of a node (``QUERIED`` attributes)."""


class HTCondorJobAds:
    """Chirp inside the job (needs ``want_io_proxy = true``), the schedd on the access point."""

    def set_own(self, run_id: str, node: str, name: str, value: str | int | None) -> None:
        import classad2

        if value is None:
            expression = "undefined"
        elif isinstance(value, int):
            expression = str(value)
        else:
            expression = classad2.quote(value)
        with self._chirp() as chirp:
            chirp.set_job_attr(name, expression)

    def get_own(self, run_id: str, node: str, name: str) -> str | int | None:
        import classad2

        with self._chirp() as chirp:
            text = chirp.get_job_attr(name).strip()
        if not text or text.lower() == "undefined":
            return None
        value = classad2.ExprTree(text).eval()
        if isinstance(value, str | int) and not isinstance(value, bool):
            return value
        return None

    def find(self, run_id: str, node: str) -> list[QueuedAd]:
        import classad2
        import htcondor2

        constraint = (
            f"{RUN_ATTRIBUTE} == {classad2.quote(run_id)} && "
            f"{NODE_ATTRIBUTE} == {classad2.quote(node)}"
        )
        try:
            ads = htcondor2.Schedd().query(constraint, list(QUERIED))
        except Exception as err:  # htcondor2 raises bare HTCondorException/OSError
            raise ServerError(f"cannot query the schedd for {node}'s job ad: {err}") from None
        return [QueuedAd.from_ad(ad) for ad in ads]

    @staticmethod
    def _chirp() -> Any:
        try:
            from htcondor2.htchirp import HTChirp

            return HTChirp()
        except (ImportError, ValueError, OSError) as err:
            raise ServerError(
                f"cannot reach the job's chirp proxy ({err}); the server's submit file needs "
                "want_io_proxy = true"
            ) from None


class FileJobAds:
    """Job ads kept in a JSON file: ``{"<run_id>/<node>": {attribute: value}}``.

    A node's ad exists once its job set an attribute (or a test wrote it); ``JobStatus``
    defaults to running and ``NumJobStarts`` to 1, as for a job that started once. A damaged
    file is a ``ServerError`` naming it, and is left as it is (``_locked``).
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    @contextmanager
    def _locked(self) -> Any:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(self.path.name + ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            ads = self._read()
            yield ads
            write_text_atomic(self.path, json.dumps(ads, indent=2))

    def _read(self) -> dict[str, dict[str, Any]]:
        """The file's ads, ``{"<run_id>/<node>": {attribute: value}}`` ({} before the first)."""
        if not self.path.exists():
            return {}
        try:
            ads = json.loads(read_text_or(self.path, ServerError))
        except ValueError as err:
            raise ServerError(f"{self.path}: the job ads' stand-in is damaged (not JSON: {err}); "
                              "stop the run, delete it, and run again") from None
        if not isinstance(ads, dict) or not all(isinstance(ad, dict) for ad in ads.values()):
            raise ServerError(f"{self.path}: the job ads' stand-in is damaged (not an object "
                              "of ads by \"<run_id>/<node>\"); stop the run, delete it, and run "
                              "again")
        return ads

    def set_own(self, run_id: str, node: str, name: str, value: str | int | None) -> None:
        with self._locked() as ads:
            ad = ads.setdefault(f"{run_id}/{node}", {})
            if value is None:
                ad.pop(name, None)
            else:
                ad[name] = value

    def get_own(self, run_id: str, node: str, name: str) -> str | int | None:
        ad = self._ad(run_id, node)
        return None if ad is None else ad.get(name)

    def find(self, run_id: str, node: str) -> list[QueuedAd]:
        ad = self._ad(run_id, node)
        return [] if ad is None else [QueuedAd.from_ad(ad)]

    def _ad(self, run_id: str, node: str) -> dict[str, Any] | None:
        with self._locked() as ads:
            ad = ads.get(f"{run_id}/{node}")
            if ad is None:
                return None
            return {"JobStatus": RUNNING, "NumJobStarts": 1, **ad}


def job_ads() -> JobAds:
    """``FileJobAds`` when ``OFFLINE_IAAS_FAKE_JOB_ADS`` is set, else ``HTCondorJobAds``."""
    fake = os.environ.get(FAKE_ENV)
    return FileJobAds(Path(fake)) if fake else HTCondorJobAds()
