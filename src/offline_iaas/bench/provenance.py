"""Which code a published number came from: the commit of the checkout that produced it.

Every generated document under ``benchmarks/`` (and ``docs/networks.md``) names the command
that wrote it and this commit, so a reader can tell whether it describes the landed code.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from offline_iaas.atomic import write_text_atomic

SOURCE_ROOT = Path(__file__).resolve().parents[3]
"""The checkout this package was imported from (``src/offline_iaas/bench/`` is three down)."""


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def source_commit(root: Path | None = None) -> str:
    """The short commit of the checkout at ``root`` (default: this package's), with
    ``+uncommitted changes`` when tracked files differ from it; ``unknown`` outside git."""
    for where in ([root] if root is not None else [SOURCE_ROOT, Path.cwd()]):
        commit = _git(where, "rev-parse", "--short=10", "HEAD")
        if commit:
            dirty = _git(where, "status", "--porcelain", "--untracked-files=no")
            return commit + (" +uncommitted changes" if dirty else "")
    return "unknown (not a git checkout)"


def command_line(module: str, argv: Sequence[str] | None) -> str:
    """The command that ran ``module``'s ``main(argv)`` (``sys.argv``'s arguments without)."""
    return " ".join(["python -m", module, *(sys.argv[1:] if argv is None else argv)])


def provenance_line(command: str) -> str:
    """A generated document's last line: the command that wrote it and the commit."""
    return f"Command: `{command}` at commit `{source_commit()}`."


def publish(text: str, command: str, out: Path | None) -> None:
    """Print a generated document ending in its ``provenance_line``, and write it to ``out``
    too where given."""
    text = f"{text}\n\n{provenance_line(command)}\n"
    print(text)
    if out is not None:
        write_text_atomic(out, text)
