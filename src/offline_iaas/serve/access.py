"""The per-run access token: only the campaign's own clients may use its servers.

``make-dag`` writes a random token to ``RUN/token`` (mode 0600, kept when the run directory is
rewritten); servers restrict inference and administrative protocols to requests carrying it in
the ``offline-iaas-token`` header; clients send it.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

TOKEN_FILE = "token"
TOKEN_HEADER = "offline-iaas-token"


def token_path(run_dir: Path) -> Path:
    return run_dir / TOKEN_FILE


def write_token(run_dir: Path) -> str:
    """The run's token, created (owner-readable only) if the run has none yet."""
    path = token_path(run_dir)
    if path.exists():
        return path.read_text().strip()
    token = secrets.token_hex(16)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    os.replace(tmp, path)
    return token


def read_token(run_dir: Path) -> str | None:
    try:
        return token_path(run_dir).read_text().strip() or None
    except FileNotFoundError:
        return None


def auth_headers(run_dir: Path) -> dict[str, str]:
    """gRPC headers that authorise a request on the run's servers (none if it has no token)."""
    token = read_token(run_dir)
    return {TOKEN_HEADER: token} if token else {}
