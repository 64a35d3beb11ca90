"""Why a node of ``run-local`` failed, in one line: the error line its command wrote.

Every ``offline-iaas`` command ends a failure with one line, ``offline-iaas <command>: error:
<message>`` (``cli.main``). It goes to the node's ``.err`` log and, under run-local, into a
pipe as well (``ErrorPipe``; the command finds it through ``errors.ERROR_FD_ENV``): when the
disk that holds the logs is full, the log stays empty but the line still reaches run-local,
which puts it into its warnings and its summary.
"""

from __future__ import annotations

import os
from pathlib import Path

from offline_iaas.errors import ERROR_FD_ENV, RunError
from offline_iaas.rundir import RunDir
from offline_iaas.workflow.processes import NodeRun, describe_exit

_ERROR_MARK = ": error: "


class ErrorPipe:
    """A pipe that one process of a node writes its error line into (at most a few lines,
    well within the pipe's buffer, so the writer never blocks)."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)

    def env(self) -> dict[str, str]:
        """What the node's environment gets: the number of the pipe's writing end."""
        return {ERROR_FD_ENV: str(self.write_fd)}

    def started(self) -> None:
        """The process holds its end now (``pass_fds``): close ours, keep reading."""
        if self.write_fd >= 0:
            os.close(self.write_fd)
            self.write_fd = -1

    def close(self) -> str:
        """Everything written so far, then close the pipe."""
        self.started()
        shards = []
        if self.read_fd >= 0:
            try:
                while shard := os.read(self.read_fd, 65536):
                    shards.append(shard)
            except BlockingIOError:  # a child of the node still holds the writing end
                pass
            os.close(self.read_fd)
            self.read_fd = -1
        return b"".join(shards).decode(errors="replace")


def error_in(text: str) -> str:
    """The last error line of a command's output (``offline-iaas <command>: error: ...``),
    without its prefix; '' when there is none."""
    for line in reversed(text.splitlines()):
        if line.startswith("offline-iaas ") and _ERROR_MARK in line:
            return line.split(_ERROR_MARK, 1)[1].strip()
    return ""


def last_error(path: Path) -> str:
    """The last error line of a node's ``.err`` log, without the prefix; '' when there is
    none (or the log cannot be read)."""
    if not path.is_file():  # a device (/dev/null, /dev/full) reads forever or nothing
        return ""
    try:
        with open(path, "rb") as f:  # the end of the log is enough
            f.seek(max(0, f.seek(0, 2) - 65536))
            return error_in(f.read(65536).decode(errors="replace"))
    except OSError:
        return ""


def node_error(pipe: ErrorPipe | None, stderr: Path) -> str:
    """A finished process's error line: from its pipe, else from its ``.err`` log."""
    line = error_in(pipe.close()) if pipe is not None else ""
    return line or last_error(stderr)


def run_failure(run: RunDir, failed: list[NodeRun], errors: dict[str, str],
                not_run: list[str], aborted: tuple[str, int] | None) -> RunError:
    """run-local's summary of a failed run, one line: each failed node with its exit, its
    attempts, its error line (``errors``, by node) and its logs; the nodes not run."""

    def rel(path: Path) -> str:
        return str(path.relative_to(run.path)) if path.is_relative_to(run.path) else str(path)

    parts = []
    for r in failed:
        why = describe_exit(r.exit_code) if r.exit_code is not None else "stopped"
        tries = f"{r.attempts} attempt{'s' if r.attempts != 1 else ''}"
        line = f": {errors[r.node.name]}" if errors.get(r.node.name) else ""
        files = f"{rel(r.command.stderr)}, {rel(r.command.stdout)}"
        parts.append(f"{r.node.name} ({why} after {tries}{line}; see {files})")
    message = f"{run.path}: "
    if aborted is not None:
        message += f"DAG aborted: {aborted[0]} exited with {aborted[1]} (ABORT-DAG-ON); "
    count = len(failed)
    message += f"{count} node{'s' if count != 1 else ''} failed: " + "; ".join(parts)
    if not_run:
        message += f"; not run: {', '.join(not_run)}"
    return RunError(message)
