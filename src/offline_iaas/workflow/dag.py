"""The campaign DAG as read: its nodes (``Dag``, ``DagNode``, ``Script``) and ``parse_dag``,
which reads the subset of the DAGMan language that the local executor can run and rejects
everything else with the line it is on (pure logic, no I/O). ``workflow/dag_writer.py``
writes make-dag's ``offline.dag``.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from offline_iaas.config_numbers import MAX_PARALLEL_NODES, MAX_RETRIES
from offline_iaas.errors import RunError

FINAL_NODE = "final"
MAKE_DAG_HEADER = "# offline-iaas campaign DAG, written by `offline-iaas make-dag`."
"""The first line of make-dag's DAG (a DAG without it was written by hand)."""
SCRIPT_MACROS: tuple[str, ...] = ("$JOB", "$RETRY", "$MAX_RETRIES", "$DAG_STATUS", "$FAILED_COUNT")

NODE_KINDS: tuple[str, ...] = ("SERVICE", "JOB", "FINAL")
_RESERVED = {"PARENT", "CHILD", "ALL_NODES"}
_VAR_NAME = re.compile(r"[A-Za-z0-9_.+]+")


@dataclass(frozen=True)
class Script:
    """A node's ``SCRIPT [DEFER status time] PRE`` command."""

    executable: str
    arguments: tuple[str, ...] = ()
    """Words after the executable; ``$JOB``, ``$RETRY``... are substituted when it runs."""
    defer_status: int | None = None
    """Exit code that means "run me again later" (not a failure)."""
    defer_seconds: int = 0
    """How long to wait before running a deferred script again."""

    def argv(self, macros: dict[str, str]) -> list[str]:
        """The command line, each argument that is exactly a macro (``$JOB``) replaced."""
        return [self.executable, *(macros.get(word, word) for word in self.arguments)]


@dataclass
class DagNode:
    """One node of a DAG file."""

    name: str
    kind: str
    """``SERVICE``, ``JOB`` or ``FINAL``."""
    submit: str
    """Submit file, relative to the DAG file's directory unless absolute."""
    variables: dict[str, str] = field(default_factory=dict)
    """Its ``VARS`` (macro name as written to value)."""
    retries: int = 0
    parents: set[str] = field(default_factory=set)
    category: str | None = None
    unless_exit: int | None = None
    """``RETRY ... UNLESS-EXIT v``: an exit code that is never retried."""
    pre: Script | None = None
    """Its ``SCRIPT PRE``: run before each attempt of the job, on the access point."""
    abort_exit: int | None = None
    """``ABORT-DAG-ON``: the exit code (of the job or PRE script) that aborts the whole DAG."""
    abort_return: int | None = None
    """The DAG's exit code after such an abort (None: the node's exit code)."""
    line: int = 0
    """Line of the file that defined the node."""


@dataclass
class Dag:
    """A parsed DAG file."""

    nodes: dict[str, DagNode] = field(default_factory=dict)
    """Nodes in the order the file defines them."""
    maxjobs: dict[str, int] = field(default_factory=dict)
    """Category to the most nodes of it that run at once."""
    node_status_file: str | None = None

    def child_map(self) -> dict[str, list[str]]:
        """Each node's children (the nodes that name it as a parent), in file order."""
        found: dict[str, list[str]] = {name: [] for name in self.nodes}
        for node in self.nodes.values():
            for parent in node.parents:
                found.setdefault(parent, []).append(node.name)
        return found

    def descendants(self, name: str) -> set[str]:
        """Every node below ``name`` (children, their children, ...)."""
        children = self.child_map()
        found: set[str] = set()
        todo = list(children.get(name, []))
        while todo:
            child = todo.pop()
            if child not in found:
                found.add(child)
                todo.extend(children.get(child, []))
        return found


class _Line:
    def __init__(self, source: str, number: int, text: str) -> None:
        self.source, self.number, self.text = source, number, text

    def error(self, why: str) -> RunError:
        return RunError(f"{self.source} line {self.number}: {why}")


_NOT_PLAIN = re.compile(r"[\"'\\]|[^\S \t]")
"""A character on which ``str.split`` and ``shlex.split`` may part: a quote, a backslash, or
white space other than a space or a tab (``shlex`` splits on space, tab, CR and LF, and a
line holds neither of the last two; ``str.split`` on all Unicode white space)."""


def dag_words(text: str) -> list[str]:
    """A DAG line's words, as ``shlex.split`` (POSIX, no comments) gives them.

    A line with none of ``_NOT_PLAIN``'s characters (every line of make-dag's DAG that is split
    into words) is split by ``str.split``: the same words (tests/test_dag_words.py), without
    ``shlex``'s character-by-character reading, most of the DAG's parse at O3 scale.

    Parameters
    ----------
    text : str
        One line, without its line break.

    Returns
    -------
    list of str
        Its words, quotes and escapes removed.

    Raises
    ------
    ValueError
        ``shlex``'s: a quote not closed, a backslash at the end.
    """
    if _NOT_PLAIN.search(text) is None:
        return text.split()
    return shlex.split(text, comments=False, posix=True)


def _tokens(line: _Line) -> list[str]:
    try:
        return dag_words(line.text)
    except ValueError as err:
        raise line.error(f"cannot split the line into words: {err}") from None


def _parse_vars(line: _Line, text: str) -> dict[str, str]:
    """``name="value" ...`` (``\\"`` and ``\\\\`` escapes in values) to a dict."""
    out: dict[str, str] = {}
    pos = 0
    while True:
        while pos < len(text) and text[pos] in " \t":
            pos += 1
        if pos == len(text):
            break
        match = _VAR_NAME.match(text, pos)
        if not match:
            raise line.error(f'expected name="value" in VARS, found {text[pos:]!r}')
        name, pos = match.group(0), match.end()
        while pos < len(text) and text[pos] in " \t":
            pos += 1
        if pos == len(text) or text[pos] != "=":
            raise line.error(f"VARS {name}: expected '=' after the name")
        pos += 1
        while pos < len(text) and text[pos] in " \t":
            pos += 1
        if pos == len(text) or text[pos] != '"':
            raise line.error(f'VARS {name}: the value must be in double quotes ({name}="...")')
        pos += 1
        value: list[str] = []
        while True:
            if pos == len(text):
                raise line.error(f"VARS {name}: the value has no closing double quote")
            char = text[pos]
            if char == "\\" and pos + 1 < len(text) and text[pos + 1] in '"\\':
                value.append(text[pos + 1])
                pos += 2
            elif char == '"':
                pos += 1
                break
            else:
                value.append(char)
                pos += 1
        if name.lower().startswith("queue"):
            raise line.error(f"VARS: a macro name cannot begin with 'queue' ({name})")
        out[name] = "".join(value)
    if not out:
        raise line.error('VARS needs at least one name="value" pair')
    return out


def _int(line: _Line, word: str, what: str, minimum: int | None = 0) -> int:
    try:
        value = int(word)
    except ValueError:
        raise line.error(f"{what} must be an integer, got {word!r}") from None
    if minimum is not None and value < minimum:
        raise line.error(f"{what} must be at least {minimum}, got {value}")
    return value


def parse_dag(text: str, source: str = "offline.dag") -> Dag:
    """Read a DAG file.

    Understands ``JOB`` (and its synonym ``NODE``), ``SERVICE``, ``FINAL``, ``VARS``,
    ``RETRY n N [UNLESS-EXIT v]``, ``ABORT-DAG-ON n v [RETURN r]``,
    ``SCRIPT [DEFER status time] [DEBUG file type] PRE n exe args...``, ``PARENT ... CHILD ...``,
    ``CATEGORY``, ``MAXJOBS``, ``NODE_STATUS_FILE``, comments and blank lines; keywords in any
    case. As in DAGMan, a node may be referred to before the line that defines it.

    Parameters
    ----------
    text
        The file's contents.
    source
        Name used in error messages.

    Raises
    ------
    RunError
        ``"<source> line N: ..."`` for a line it does not understand, an unknown node, or a
        command DAGMan would refuse (RETRY or PARENT/CHILD on a SERVICE node, ...); a RETRY or
        MAXJOBS count beyond the config's bound of its key (DAGMan reads each as a C int); a
        cycle of PARENT/CHILD lines.
    """
    lines = [_Line(source, number, raw.strip())
             for number, raw in enumerate(text.splitlines(), start=1)
             if raw.strip() and not raw.strip().startswith("#")]
    dag = Dag()
    # Pass 1: node definitions, so that other commands may name nodes defined further down.
    later = [line for line in lines if not _define_node(dag, line)]
    # Pass 2: everything else.
    for line in later:
        keyword = line.text.split(None, 1)[0].upper()
        command = _COMMANDS.get(keyword)
        if command is None:
            raise line.error(f"unknown or unsupported DAG command {_tokens(line)[0]!r}")
        command(dag, line)
    _check_acyclic(dag, source)
    return dag


def _define_node(dag: Dag, line: _Line) -> bool:
    """Add the node ``line`` defines (``JOB``, ``NODE``, ``SERVICE``, ``FINAL``) to ``dag``;
    False for a line of another command."""
    keyword = line.text.split(None, 1)[0].upper()
    if keyword not in ("JOB", "NODE", "SERVICE", "FINAL"):
        return False
    words = _tokens(line)
    kind = "JOB" if keyword == "NODE" else keyword
    if len(words) < 3:
        raise line.error(f"{keyword} needs a node name and a submit file")
    if len(words) > 3:
        raise line.error(
            f"{keyword} {words[1]}: unsupported options {' '.join(words[3:])!r} "
            "(DIR, NOOP and DONE are not used by offline-iaas)"
        )
    name, submit = words[1], words[2]
    if name.upper() in _RESERVED or "+" in name:
        raise line.error(f"{name!r} cannot be a node name")
    if name in dag.nodes:
        raise line.error(f"node {name} is defined twice (first on line {dag.nodes[name].line})")
    if kind == "FINAL" and any(n.kind == "FINAL" for n in dag.nodes.values()):
        raise line.error("a DAG can have only one FINAL node")
    dag.nodes[name] = DagNode(name=name, kind=kind, submit=submit, line=line.number)
    return True


def _targets(dag: Dag, line: _Line, name: str, command: str,
             kinds: Iterable[str]) -> list[DagNode]:
    """The nodes a command of ``line`` names: ``name``, or every node of ``kinds`` for
    ``ALL_NODES``; RunError for an unknown node or one of another kind."""
    if name.upper() == "ALL_NODES":
        # As in DAGMan, ALL_NODES never includes the FINAL node.
        return [n for n in dag.nodes.values() if n.kind in kinds and n.kind != "FINAL"]
    node = dag.nodes.get(name)
    if node is None:
        raise line.error(f"{command} names an unknown node {name!r}")
    if node.kind not in kinds:
        raise line.error(f"{command} cannot be used on the {node.kind} node {name}")
    return [node]


def _vars(dag: Dag, line: _Line) -> None:
    # Re-split the raw text: values keep their quotes and escapes for _parse_vars.
    parts = line.text.split(None, 2)
    if len(parts) < 3:
        raise line.error('VARS needs a node name and name="value" pairs')
    rest = parts[2]
    head = rest.split(None, 1)
    if head and head[0].upper() in ("PREPEND", "APPEND"):
        rest = head[1] if len(head) > 1 else ""
    values = _parse_vars(line, rest)
    for node in _targets(dag, line, parts[1], "VARS", NODE_KINDS):
        node.variables.update(values)


def _retry(dag: Dag, line: _Line) -> None:
    args = _tokens(line)[1:]
    if len(args) not in (2, 4) or (len(args) == 4 and args[2].upper() != "UNLESS-EXIT"):
        raise line.error("expected RETRY <node> <count> [UNLESS-EXIT <exit code>]")
    count = _int(line, args[1], "the RETRY count")
    if count > MAX_RETRIES:  # the config's bound: a node tried that often has a cause
        raise line.error(f"the RETRY count must be at most {MAX_RETRIES} (as workflow.retries), "
                         f"got {count}")
    unless = _int(line, args[3], "the UNLESS-EXIT code", None) if len(args) == 4 else None
    for node in _targets(dag, line, args[0], "RETRY", ("JOB",)):
        node.retries, node.unless_exit = count, unless


def _parent(dag: Dag, line: _Line) -> None:
    args = _tokens(line)[1:]
    upper = [w.upper() for w in args]
    if "CHILD" not in upper:
        raise line.error("PARENT line without CHILD")
    split = upper.index("CHILD")
    parents, children = args[:split], args[split + 1 :]
    if not parents or not children:
        raise line.error("expected PARENT <node>... CHILD <node>...")
    parent_nodes = [p for name in parents for p in _targets(dag, line, name, "PARENT", ("JOB",))]
    for name in children:
        for child in _targets(dag, line, name, "CHILD", ("JOB",)):
            if any(p.name == child.name for p in parent_nodes):
                raise line.error(f"node {child.name} cannot be its own parent")
            child.parents.update(p.name for p in parent_nodes)


def _category(dag: Dag, line: _Line) -> None:
    args = _tokens(line)[1:]
    if len(args) != 2:
        raise line.error("expected CATEGORY <node> <category>")
    for node in _targets(dag, line, args[0], "CATEGORY", ("JOB",)):
        node.category = args[1]


def _maxjobs(dag: Dag, line: _Line) -> None:
    args = _tokens(line)[1:]
    if len(args) != 2:
        raise line.error("expected MAXJOBS <category> <count>")
    count = _int(line, args[1], "the MAXJOBS count", 1)
    if count > MAX_PARALLEL_NODES:  # DAGMan's C int, wrapped beyond
        raise line.error(f"the MAXJOBS count must be at most {MAX_PARALLEL_NODES} (as "
                         f"workflow.max_parallel_clients and max_parallel_merges), got {count}")
    dag.maxjobs[args[0]] = count


def _abort_dag_on(dag: Dag, line: _Line) -> None:
    args = _tokens(line)[1:]
    if len(args) not in (2, 4) or (len(args) == 4 and args[2].upper() != "RETURN"):
        raise line.error("expected ABORT-DAG-ON <node> <exit code> [RETURN <DAG code>]")
    value = _int(line, args[1], "the ABORT-DAG-ON exit code", None)
    ret = _int(line, args[3], "the ABORT-DAG-ON RETURN value", None) if len(args) == 4 else None
    for node in _targets(dag, line, args[0], "ABORT-DAG-ON", ("JOB",)):
        node.abort_exit, node.abort_return = value, ret


def _node_status_file(dag: Dag, line: _Line) -> None:
    args = _tokens(line)[1:]
    if not 1 <= len(args) <= 3:
        raise line.error("expected NODE_STATUS_FILE <file> [<seconds>] [ALWAYS-UPDATE]")
    if len(args) >= 2:
        _int(line, args[1], "the NODE_STATUS_FILE update interval")
    if len(args) == 3 and args[2].upper() != "ALWAYS-UPDATE":
        raise line.error(f"unexpected word {args[2]!r} on NODE_STATUS_FILE")
    dag.node_status_file = args[0]


def _script(dag: Dag, line: _Line) -> None:
    """``SCRIPT [DEFER status time] [DEBUG file type] PRE <node> <exe> [args...]``."""
    rest = _tokens(line)[1:]
    defer_status, defer_seconds = None, 0
    if rest and rest[0].upper() == "DEFER":
        if len(rest) < 3:
            raise line.error("expected SCRIPT DEFER <status> <seconds> ...")
        defer_status = _int(line, rest[1], "the DEFER status", None)
        defer_seconds = _int(line, rest[2], "the DEFER time")
        rest = rest[3:]
    if rest and rest[0].upper() == "DEBUG":
        if len(rest) < 3 or rest[2].upper() not in ("STDOUT", "STDERR", "ALL"):
            raise line.error("expected SCRIPT ... DEBUG <file> <STDOUT|STDERR|ALL> ...")
        rest = rest[3:]
    if len(rest) < 3:
        raise line.error("expected SCRIPT [DEFER status time] PRE <node> <executable> [arguments]")
    kind = rest[0].upper()
    if kind in ("POST", "HOLD"):
        raise line.error(f"SCRIPT {kind} is not supported (offline-iaas uses PRE scripts only)")
    if kind != "PRE":
        raise line.error(f"expected PRE, POST or HOLD after SCRIPT, found {rest[0]!r}")
    script = Script(rest[2], tuple(rest[3:]), defer_status, defer_seconds)
    for node in _targets(dag, line, rest[1], "SCRIPT", ("JOB", "FINAL")):
        node.pre = script


_COMMANDS: dict[str, Callable[[Dag, _Line], None]] = {
    "VARS": _vars, "RETRY": _retry, "PARENT": _parent, "CATEGORY": _category,
    "MAXJOBS": _maxjobs, "SCRIPT": _script, "ABORT-DAG-ON": _abort_dag_on,
    "NODE_STATUS_FILE": _node_status_file,
}
"""The commands after the node definitions, each checking its own line."""


def _check_acyclic(dag: Dag, source: str) -> None:
    """Raise RunError if the PARENT/CHILD lines make a cycle."""
    missing = {name: len(node.parents) for name, node in dag.nodes.items()}
    children = dag.child_map()
    ready = [name for name, count in missing.items() if count == 0]
    while ready:
        done = ready.pop()
        for child in children.get(done, []):
            missing[child] -= 1
            if missing[child] == 0:
                ready.append(child)
    cycle = [name for name, count in missing.items() if count > 0]
    if cycle:
        raise RunError(
            f"{source}: the PARENT/CHILD lines make a cycle through (or below) {', '.join(cycle)}"
        )
