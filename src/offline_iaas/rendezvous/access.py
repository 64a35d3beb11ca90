"""The per-run access token: only the campaign's own clients may use its servers.

``make-dag`` writes a random token to ``RUN/token`` (mode 0600, kept when the run directory is
rewritten). Servers restrict every protocol but health (inference, metadata, model
configuration and repository, shared memory, statistics, trace, logging) to requests that
carry it (``restricted_flags``); clients send it (``auth_headers``). The token never goes into
a log or an address file.

Triton 2.51 checks the key given to ``--http-restricted-api`` as an HTTP header as it is
(``offline-iaas-token``), but the key given to ``--grpc-restricted-protocol`` as the gRPC
metadata key ``triton-grpc-protocol-<key>`` (seen here: a gRPC request carrying
``offline-iaas-token`` is refused with "expecting header 'triton-grpc-protocol-...'").
"""

from __future__ import annotations

import os
import secrets

from offline_iaas import records
from offline_iaas.atomic import replaced_atomically
from offline_iaas.bounded_read import read_text_or
from offline_iaas.errors import RunError
from offline_iaas.rundir import RunDir, restore_advice

TOKEN_HEADER = "offline-iaas-token"
"""The key given to Triton; the HTTP header name."""
GRPC_TOKEN_HEADER = f"triton-grpc-protocol-{TOKEN_HEADER}"
"""The gRPC metadata key Triton checks for ``TOKEN_HEADER``."""
RESTRICTED_PROTOCOLS: tuple[str, ...] = (
    "metadata",
    "inference",
    "shared-memory",
    "model-config",
    "model-repository",
    "statistics",
    "trace",
    "logging",
)
"""Everything but ``health``, which readiness probes use without the token."""


def write_token(run: RunDir) -> str:
    """The run's token, created (owner-readable only) if the run has none yet.

    An existing token is kept, and its mode set to 0600 if it was wider.
    """
    path = run.token
    if path.exists():
        if path.stat().st_mode & 0o077:
            path.chmod(0o600)
        return read_text_or(path, RunError).strip()  # a FIFO there: named, not waited on
    token = secrets.token_hex(16)
    with replaced_atomically(path) as tmp:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # never wider
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
    return token


def read_token(run: RunDir) -> str | None:
    """The run's token; None for a run that has none by design (a DAG written by hand, or a
    run directory written before tokens: without run.json, or with one of schema version 1).

    Raises
    ------
    RunError
        The token of a later run is missing or empty: its servers would take requests from
        anyone who reaches their ports.
    """
    try:
        token = read_text_or(run.token, RunError).strip()
    except FileNotFoundError:
        token, lost = "", "is missing"
    else:
        lost = "is empty"
    if token or not _written_with_a_token(run):
        return token or None
    raise RunError(f"{run.token} {lost}: the servers' access token (without it they would take "
                   f"requests from anyone who reaches their ports); {restore_advice(run)}")


def _written_with_a_token(run: RunDir) -> bool:
    """Whether make-dag wrote ``run`` with a token: its run.json is of schema version 2 or
    later (tokens came first). A run.json missing or damaged: no (its own checks say so)."""
    version = records.written_version(run.run_info)
    return version is not None and version >= 2


def auth_headers(run: RunDir) -> dict[str, str]:
    """gRPC headers that authorise a request on the run's servers (none if it has no token;
    RunError as ``read_token``)."""
    token = read_token(run)
    return {GRPC_TOKEN_HEADER: token} if token else {}


def restricted_flags(token: str | None) -> list[str]:
    """tritonserver options restricting ``RESTRICTED_PROTOCOLS`` to requests with ``token``.

    Empty without a token (a run directory written before tokens: the server is open).
    """
    if not token:
        return []
    value = f"{','.join(RESTRICTED_PROTOCOLS)}:{TOKEN_HEADER}={token}"
    return [f"--grpc-restricted-protocol={value}", f"--http-restricted-api={value}"]
