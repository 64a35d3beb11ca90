"""Submit templates: rendering, HTCondor's parser, macro expansion."""

from __future__ import annotations

from pathlib import Path

import htcondor2
import pytest

from offline_iaas.errors import RunError
from offline_iaas.workflow.submit import (
    ROLES,
    expand_macros,
    parse_submit,
    render_submit,
    template_text,
    unexpanded_macros,
)

REPO = Path(__file__).resolve().parents[1]
VALUES = {
    "UNIVERSE": "vanilla",
    "EXECUTABLE": "/opt/env/bin/offline-iaas",
    "ARGUMENTS": "serve --run-dir . --node $(node)",
    "SERVER_RETRIES": "2",
    "SITE": "# Resources.\nrequest_cpus = 3\nrequest_memory = 4GB\nrequest_disk = 2GB\n",
}


@pytest.mark.parametrize(
    ("role", "log"),
    [
        ("server", "logs/$(node).log"),
        ("client", "logs/$(node).log"),
        ("merge", "logs/merge.log"),
        ("final", "logs/final.log"),
    ],
)
def test_rendered_templates_parse(role: str, log: str) -> None:
    text = render_submit(role, VALUES)
    items = dict(htcondor2.Submit(text).items())
    assert items["universe"] == ("local" if role == "final" else "vanilla")
    assert items["executable"] == "/opt/env/bin/offline-iaas"
    if role != "final":
        assert items["arguments"] == '"serve --run-dir . --node $(node)"'
    else:
        assert items["arguments"].startswith('"status . --final --dag-status')
    assert "initialdir" not in items  # the job starts where DAGMan submits it: the run directory
    assert items["log"] == log
    assert items["output"] == log.replace(".log", ".out")
    assert items["error"] == log.replace(".log", ".err")
    assert items["request_cpus"] == "3"
    assert items["request_memory"] == "4GB"
    assert items["request_disk"] == "2GB"
    assert "getenv" not in {key.lower() for key in items}
    assert text.rstrip().endswith("queue")
    if role == "server":
        assert items["max_retries"] == "2"


def test_every_role_has_a_template_with_comments() -> None:
    for role in ROLES:
        lines = template_text(role).splitlines()
        assert lines[0].startswith("#")
        assert sum(line.startswith("#") for line in lines) >= 4


def test_submit_templates_are_package_data_and_no_link_stands_for_a_folder() -> None:
    templates = REPO / "submit"  # installed as offline_iaas.submit_files (pyproject.toml)
    for role in ROLES:
        assert (templates / f"{role}.sub").read_text() == template_text(role)
    # workflow/ and submit/ are folders, not links into the package
    assert [p.name for p in REPO.iterdir() if p.is_symlink()] == []


def test_render_refuses_missing_values_and_unknown_roles() -> None:
    values = dict(VALUES)
    del values["SITE"]
    with pytest.raises(ValueError, match="@SITE@"):
        render_submit("client", values)
    with pytest.raises(ValueError, match="unknown submit role"):
        render_submit("worker", VALUES)


def test_render_does_not_rescan_values() -> None:
    text = render_submit("merge", {**VALUES, "ARGUMENTS": "merge --run-dir /x/@EXECUTABLE@"})
    assert "/x/@EXECUTABLE@" in text


def test_parse_submit(tmp_path: Path) -> None:
    path = tmp_path / "job.sub"
    path.write_text('# job\nExecutable = /bin/true\narguments = "a $(node)"\nMY.Tag = "x"\nqueue\n')
    assert parse_submit(path) == {
        "Executable": "/bin/true",
        "arguments": '"a $(node)"',
        "MY.Tag": '"x"',
    }


def test_parse_submit_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(RunError, match="missing.sub"):
        parse_submit(tmp_path / "missing.sub")
    bad = tmp_path / "bad.sub"
    bad.write_text("executable = /bin/true\nthis is not a command\nqueue\n")
    with pytest.raises(RunError, match="bad.sub"):
        parse_submit(bad)


def test_expand_macros() -> None:
    variables = {"Node": "client3", "dir": "logs/$(NODE)", "a": "$(b)", "b": "$(a)"}
    assert expand_macros("$(node).log", variables) == "client3.log"
    assert expand_macros("$(DIR)/x.err", variables) == "logs/client3/x.err"
    assert expand_macros("$(missing:fallback)-$(node:x)", variables) == "fallback-client3"
    assert expand_macros("$(missing) $$(Memory)", variables) == "$(missing) $$(Memory)"
    assert unexpanded_macros(expand_macros("$(missing) $$(Memory)", variables)) == ["$(missing)"]
    with pytest.raises(ValueError, match="loop"):
        expand_macros("$(a)", variables)
