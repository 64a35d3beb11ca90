"""What HTCondor does with a submit description, emulated on this machine for ``run-local``.

The submit language's ``arguments`` and ``environment`` syntaxes (old and new), the command a
node's submit file and VARS expand to (``node_command``), and file transfer
(``transfer_input_files`` / ``transfer_output_files``, ``preserve_relative_paths``) between
the node's ``initialdir`` and its sandbox.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from offline_iaas.atomic import replaced_atomically
from offline_iaas.errors import RunError
from offline_iaas.rundir import RunDir
from offline_iaas.workflow.dag import DagNode
from offline_iaas.workflow.submit import expand_macros, unexpanded_macros

LOCAL_UNIVERSES = {"vanilla", "local", "scheduler"}
"""Universes a node may ask for and still run here."""


# ---- submit values ------------------------------------------------------------------------
def split_arguments(value: str) -> list[str]:
    """Split an ``arguments`` value into argv words as condor_submit does.

    New syntax (the whole value in double quotes): words split on white space, single quotes
    group a word (``''`` inside them is a literal quote), ``""`` is a literal double quote.
    Old syntax (no surrounding double quotes): words split on white space, ``\\"`` is a quote.

    Raises
    ------
    ValueError
        On an unterminated single quote.
    """
    value = value.strip()
    if len(value) >= 2 and value[0] == '"' and value[-1] == '"':
        return _split_new_syntax(value[1:-1].replace('""', '"'))
    return [word.replace('\\"', '"') for word in value.split()]


def _split_new_syntax(text: str) -> list[str]:
    words: list[str] = []
    current: list[str] = []
    in_word = in_quotes = False
    i = 0
    while i < len(text):
        char = text[i]
        if in_quotes:
            if char == "'" and text[i + 1 : i + 2] == "'":
                current.append("'")
                i += 1
            elif char == "'":
                in_quotes = False
            else:
                current.append(char)
        elif char in " \t\r\n":
            if in_word:
                words.append("".join(current))
                current, in_word = [], False
        elif char == "'":
            in_quotes = in_word = True
        else:
            current.append(char)
            in_word = True
        i += 1
    if in_quotes:
        raise ValueError(f"unterminated single quote in {text!r}")
    if in_word:
        words.append("".join(current))
    return words


def split_environment(value: str) -> dict[str, str]:
    """Parse an ``environment`` value (new syntax ``"A=1 B='x y'"``, or old ``A=1;B=2``)."""
    value = value.strip()
    if len(value) >= 2 and value[0] == '"' and value[-1] == '"':
        words = _split_new_syntax(value[1:-1].replace('""', '"'))
    else:
        words = [w for w in value.split(";") if w.strip()]
    env = {}
    for word in words:
        name, sep, val = word.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"environment entry {word!r} is not NAME=value")
        env[name.strip()] = val
    return env



@dataclass(frozen=True)
class Transfer:
    """HTCondor file transfer of a node (``should_transfer_files = YES``).

    run-local plays it with a scratch directory per attempt (``RUN/scratch/<node>.<n>``): the
    input files are copied in, the job runs there, its output files are copied back to the
    initial directory, so that a transfer list that misses a file fails here as on a pool.
    """

    inputs: tuple[str, ...]
    outputs: tuple[str, ...] | None
    """``transfer_output_files``; None: every new top-level file, as HTCondor does."""
    preserve_paths: bool
    """``preserve_relative_paths``: relative paths keep their directories."""
    on_success_only: bool
    """``when_to_transfer_output = ON_SUCCESS``."""
    success_exit_code: int = 0


@dataclass
class NodeCommand:
    """What the local executor runs for one node."""

    argv: list[str]
    cwd: Path
    """The initial directory (``initialdir``)."""
    stdout: Path
    stderr: Path
    environment: dict[str, str] = field(default_factory=dict)
    max_retries: int = 0
    """Job-level ``max_retries``: restarts of a SERVICE node that exits with an error."""
    transfer: Transfer | None = None


def _split_list(value: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in value.split(",") if item.strip())


def _true(value: str | None) -> bool:
    return (value or "").strip().lower() in ("true", "yes", "1")


@dataclass
class _SubmitValues:
    """A node's submit commands (keys lower-cased) with the macros they may use: the DAG
    node's VARS, DAGMan's own macros and the submit file's definitions."""

    where: str
    """The submit file and node, as errors name them."""
    commands: dict[str, str]
    variables: dict[str, str]

    def value(self, key: str, default: str | None = None) -> str | None:
        """The command ``key`` with its macros expanded (``default`` where it is not set);
        RunError on a macro nothing defines."""
        raw = self.commands.get(key)
        if raw is None:
            return default
        try:
            out = expand_macros(raw, self.variables)
        except ValueError as err:
            raise RunError(f"{self.where}: {key}: {err}") from None
        left = unexpanded_macros(out)
        if left:
            raise RunError(
                f"{self.where}: {key} uses {left[0]}, which neither the submit file nor the DAG's "
                "VARS define"
            )
        return out


def node_command(
    run: RunDir,
    node: DagNode,
    submit: dict[str, str],
    ordinal: int,
    extra: dict[str, str] | None = None,
) -> NodeCommand:
    """Resolve a node's submit description into a command line, directory and files.

    Parameters
    ----------
    run
        Directory of the DAG file: relative submit files and executables are taken from it.
    node
        The DAG node (its VARS are expanded into the submit values).
    submit
        The submit file's commands, as ``parse_submit`` returns them.
    ordinal
        Stands in for ``$(ClusterId)``.
    extra
        Macros DAGMan defines for this node (``DAG_STATUS``, ``FAILED_COUNT`` of the FINAL node).

    Raises
    ------
    RunError
        If a value uses an undefined macro, or the executable or initial directory is missing.
    """
    values = _submit_values(node, submit, ordinal, extra)
    exe = _checked_executable(run, values)
    initialdir = run.resolve(values.value("initialdir") or run.path)
    if not initialdir.is_dir():
        raise RunError(f"{values.where}: initialdir {initialdir} is not a directory")

    def in_initialdir(key: str) -> Path:
        path = Path(values.value(key) or os.devnull)
        return path if path.is_absolute() else initialdir / path

    try:
        args = split_arguments(values.value("arguments") or "")
        env = split_environment(values.value("environment") or "")
    except ValueError as err:
        raise RunError(f"{values.where}: {err}") from None
    max_retries = _max_retries(values)
    transfer = _transfer(values)
    return NodeCommand(
        argv=[str(exe), *args],
        cwd=initialdir,
        stdout=in_initialdir("output"),
        stderr=in_initialdir("error"),
        environment=env,
        max_retries=max(0, max_retries),
        transfer=transfer,
    )


def _submit_values(node: DagNode, submit: dict[str, str], ordinal: int,
                   extra: dict[str, str] | None) -> _SubmitValues:
    """The node's submit commands with DAGMan's macros (``$(ClusterId)`` = ``ordinal``,
    ``extra``) and the node's VARS beside the submit file's own definitions."""
    builtins = {
        "job": node.name,
        "cluster": str(ordinal),
        "clusterid": str(ordinal),
        "process": "0",
        "procid": "0",
        **(extra or {}),
    }
    # DAGMan prepends VARS by default: a macro the submit file defines itself wins.
    return _SubmitValues(where=f"{node.submit} (node {node.name})",
                         commands={key.lower(): value for key, value in submit.items()},
                         variables={**builtins, **node.variables, **submit})


def _checked_executable(run: RunDir, values: _SubmitValues) -> Path:
    """The node's executable (relative to the DAG's directory), once its universe can run
    here; RunError where either cannot."""
    universe = (values.value("universe", "vanilla") or "vanilla").lower()
    if universe not in LOCAL_UNIVERSES:
        raise RunError(f"{values.where}: universe {universe} cannot run on this machine")
    executable = values.value("executable")
    if not executable:
        raise RunError(f"{values.where}: no executable")
    exe = run.resolve(Path(executable))
    if not exe.is_file() or not os.access(exe, os.X_OK):
        raise RunError(f"{values.where}: executable {exe} does not exist or is not executable")
    return exe


def _max_retries(values: _SubmitValues) -> int:
    """The job's ``max_retries`` as written (0 where not set); RunError where no integer."""
    retries_text = values.value("max_retries", "0") or "0"
    try:
        return int(retries_text)
    except ValueError:
        raise RunError(f"{values.where}: max_retries must be an integer, got "
                       f"{retries_text!r}") from None


def _transfer(values: _SubmitValues) -> Transfer | None:
    """The node's file transfer (None without ``should_transfer_files = YES``)."""
    if (values.value("should_transfer_files", "NO") or "NO").strip().upper() != "YES":
        return None
    when = (values.value("when_to_transfer_output", "ON_EXIT") or "ON_EXIT").strip().upper()
    success = values.value("success_exit_code", "0") or "0"
    outputs = values.value("transfer_output_files")
    try:
        success_code = int(success)
    except ValueError:
        raise RunError(f"{values.where}: success_exit_code must be an integer") from None
    return Transfer(
        inputs=_split_list(values.value("transfer_input_files", "") or ""),
        outputs=None if outputs is None else _split_list(outputs.strip('"')),
        preserve_paths=_true(values.value("preserve_relative_paths")),
        on_success_only=when == "ON_SUCCESS",
        success_exit_code=success_code,
    )


# ---- file transfer ------------------------------------------------------------------------
def _copy(source: Path, target: Path) -> None:
    """Copy a file or a directory tree; files land atomically."""
    if source.is_dir():
        for path in sorted(source.rglob("*")):
            if path.is_file():
                _copy(path, target / path.relative_to(source))
        target.mkdir(parents=True, exist_ok=True)
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    with replaced_atomically(target) as tmp:  # a full disk: no half copy stays
        shutil.copy2(source, tmp)


def _transfer_target(entry: str, root: Path, preserve: bool) -> Path:
    path = Path(entry.rstrip("/"))
    if preserve and not path.is_absolute():
        return root / path
    return root / path.name


def stage_in(transfer: Transfer, initialdir: Path, sandbox: Path) -> None:
    """Copy a node's input files into its scratch directory.

    Raises
    ------
    RunError
        For a missing input file (HTCondor would hold the job).
    """
    sandbox.mkdir(parents=True)
    for entry in transfer.inputs:
        source = Path(entry.rstrip("/"))
        source = source if source.is_absolute() else initialdir / source
        if not source.exists():
            raise RunError(
                f"transfer_input_files names {entry}, which does not exist in {initialdir} "
                "(HTCondor would put the job on hold)"
            )
        if entry.endswith("/") and source.is_dir():  # trailing slash: the directory's contents
            parent = _transfer_target(entry, sandbox, transfer.preserve_paths).parent
            _copy(source, parent)
        else:
            _copy(source, _transfer_target(entry, sandbox, transfer.preserve_paths))


def stage_out(transfer: Transfer, sandbox: Path, initialdir: Path, before: set[str]) -> None:
    """Copy a node's output files from its scratch directory back to the initial directory.

    Raises
    ------
    RunError
        For a listed output that the job did not create (HTCondor would hold the job).
    """
    if transfer.outputs is None:
        for path in sorted(sandbox.iterdir()):
            if path.is_file() and path.name not in before:
                _copy(path, initialdir / path.name)
        return
    missing = [entry for entry in transfer.outputs if not (sandbox / entry.rstrip("/")).exists()]
    if missing:
        raise RunError(
            f"transfer_output_files names {', '.join(missing)}, which the job did not create "
            "(HTCondor would put the job on hold)"
        )
    for entry in transfer.outputs:
        target = _transfer_target(entry, initialdir, transfer.preserve_paths)
        _copy(sandbox / entry.rstrip("/"), target)
