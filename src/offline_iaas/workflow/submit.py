"""Submit descriptions: render the packaged templates, read submit files, expand macros.

The templates live in ``submit/<role>.sub`` at the repository's top (installed as the package
``offline_iaas.submit_files``). Their ``@NAME@`` placeholders are filled by ``make-dag``; HTCondor
macros such as ``$(node)`` are left for DAGMan (or the local executor) to expand per node.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

from offline_iaas.errors import RunError

ROLES: tuple[str, ...] = ("server", "client", "shard", "merge", "final")
"""The roles that have a submit template, in DAG order."""

_PLACEHOLDER = re.compile(r"@([A-Z][A-Z0-9_]*)@")
# ``$$(name)`` is HTCondor's match-time expansion, not a submit macro: left alone.
_MACRO = re.compile(r"(?<!\$)\$\(([A-Za-z_][A-Za-z0-9_.]*)(?::([^)]*))?\)")
_MAX_DEPTH = 32


def template_text(role: str) -> str:
    """The unfilled submit template of a role (one of ``ROLES``)."""
    if role not in ROLES:
        raise ValueError(f"unknown submit role {role!r} (known: {', '.join(ROLES)})")
    return (resources.files("offline_iaas.submit_files") / f"{role}.sub").read_text()


def render_submit(role: str, values: dict[str, str]) -> str:
    """Fill a role's template.

    Parameters
    ----------
    role
        One of ``ROLES``.
    values
        Placeholder name (without the at signs, e.g. ``EXECUTABLE``) to value; names the
        template does not use are ignored.

    Returns
    -------
    The submit description text.

    Raises
    ------
    ValueError
        If the role is unknown or a placeholder of the template has no value.
    """
    text = template_text(role)
    missing = sorted({name for name in _PLACEHOLDER.findall(text) if name not in values})
    if missing:
        names = ", ".join(f"@{name}@" for name in missing)
        raise ValueError(f"submit template {role}.sub: no value for {names}")
    # One pass over the template only, so that a value is never itself taken for a placeholder.
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], text)


def parse_submit(path: Path) -> dict[str, str]:
    """Read a submit file with HTCondor's own parser.

    Returns
    -------
    Every command of the file, key (as written) to unexpanded value.

    Raises
    ------
    RunError
        If the file cannot be read or HTCondor cannot parse it.
    """
    import htcondor2

    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise RunError(f"{path}: cannot read submit file: {err}") from None
    try:
        submit = htcondor2.Submit(text)
    except Exception as err:  # htcondor2 raises bare ValueError/RuntimeError with terse text
        raise RunError(f"{path}: not a valid submit description: {err}") from None
    return {str(key): str(value) for key, value in submit.items()}


def expand_macros(value: str, variables: dict[str, str]) -> str:
    """Expand ``$(name)`` and ``$(name:default)`` macros as HTCondor does.

    Names are case-insensitive; a variable's value is itself expanded. A macro with neither a
    variable nor a default is left as written, so the caller can report it.

    Raises
    ------
    ValueError
        If the variables refer to each other in a loop.
    """
    lowered = {key.lower(): val for key, val in variables.items()}

    def expand(text: str, depth: int) -> str:
        if depth > _MAX_DEPTH:
            raise ValueError(f"macro expansion of {value!r} does not end (a loop of variables?)")

        def one(match: re.Match[str]) -> str:
            name, default = match.group(1).lower(), match.group(2)
            if name in lowered:
                return expand(lowered[name], depth + 1)
            if default is not None:
                return expand(default, depth + 1)
            return match.group(0)

        return _MACRO.sub(one, text)

    return expand(value, 0)


def unexpanded_macros(value: str) -> list[str]:
    """The ``$(...)`` macros left in a value after ``expand_macros``."""
    return [m.group(0) for m in _MACRO.finditer(value)]
