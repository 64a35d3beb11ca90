"""Values a bad-input hunt found passing ``check`` and ``make-dag`` (the first failure came at
run time, or never): each is refused when the config is read, exit 2, one line naming the
key, nothing written; a good value of each key is a campaign (the controls).

``server.bind = "999.1.1.1"`` (no address), ``"localhost"`` (tritonserver's HTTP endpoint
listened on 255.255.255.255), ``"::1"`` (its gRPC endpoint failed: "Socket ':::...' already
in use"); ``server.memory = "0GB"`` (and every size of a job); ``workflow.retries = 10**12``
(DAGMan's int wraps it); ``model.input_scale = 0`` (every input zero); a malformed
``data.datafind_server`` (exit 3 at run time, naming the server, not the key); a channel name
with a line break (printed as if it had none); ``data.segments`` naming a device ("does not
exist")."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from offline_iaas.cli import main
from offline_iaas.config import load_config
from offline_iaas.config_checks import parse_override, plain_value
from offline_iaas.config_numbers import MAX_RETRIES
from offline_iaas.config_section_rules import bind_problem, datafind_problem
from offline_iaas.data.segments import read_segment_file
from offline_iaas.errors import DataError
from tests.error_catalogue import cli_error, documented
from tests.helpers import SMALL_CAMPAIGN
from tests.test_config_bounds import refused_naming_key

REFUSED = [
    # (row id, command, settings, the key named, words of the message)
    ("config-bind-not-ipv4", "check", ['server.bind="999.1.1.1"'], "server.bind",
     "not an address"),
    (None, "make-dag", ['server.bind="localhost"'], "server.bind", "255.255.255.255"),
    (None, "check", ['server.bind="::1"'], "server.bind", "no IPv6 address"),
    (None, "check", ['server.bind="1.2.3"'], "server.bind", "not an address"),
    ("config-size-below-1mb", "check", ['server.memory="0GB"'], "server.memory", "1MB"),
    (None, "make-dag", ['server.disk="0.0GB"'], "server.disk", "1MB"),
    (None, "check", ['site.client_memory="0MB"'], "site.client_memory", "1MB"),
    (None, "check", ['site.client_disk="512KB"'], "site.client_disk", "1MB"),
    (None, "check", ['site.merge_memory="0T"'], "site.merge_memory", "1MB"),
    (None, "check", ['site.merge_disk="0KB"'], "site.merge_disk", "1MB"),
    ("config-retries-beyond-bound", "make-dag", [f"workflow.retries={10**12}"],
     "workflow.retries", "at most 1000"),
    (None, "check", [f"client.max_reconnects={MAX_RETRIES + 1}"], "client.max_reconnects",
     "at most 1000"),
    (None, "make-dag", ["model.input_scale=0"], "model.input_scale", "must be positive, got 0"),
    (None, "check", ["model.input_scale=-1e21"], "model.input_scale", "must not be negative"),
    ("channel-with-white-space", "check",
     ['data.channels=["H1:GDS-CALIB_STRAIN\\n", "L1:GDS-CALIB_STRAIN"]'], "data.channels",
     "'H1:GDS-CALIB_STRAIN\\n' holds white space"),
    (None, "make-dag", ['data.channels=["H1:GDS-CALIB_STRAIN\\n", "H1:GDS-CALIB_STRAIN\\n"]'],
     "data.channels", "'H1:GDS-CALIB_STRAIN\\n' holds white space"),
    (None, "check", ['data.witnesses=["H1:PEM WITNESS"]'], "data.witnesses",
     "'H1:PEM WITNESS' holds white space"),
    (None, "check", ['data.witnesses=["H1:W\\t0", "H1:W\\t0"]'], "data.witnesses",
     "'H1:W\\t0' holds white space"),
]


@pytest.mark.parametrize(("row", "command", "settings", "key", "words"), REFUSED,
                         ids=[" ".join(case[2]) for case in REFUSED])
def test_a_value_that_cannot_run_is_refused_naming_its_key_and_writes_nothing(
        row: str | None, command: str, settings: list[str], key: str, words: str,
        small_config_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = refused_naming_key(command, settings, key, row, small_config_file, capsys)
    assert words in line, line


@pytest.mark.parametrize("setting", [
    'server.bind="0.0.0.0"', 'server.bind="127.0.0.1"', 'server.bind="10.1.2.3"',
    'server.bind=""', 'server.memory="1MB"', 'server.disk="1024KB"', 'site.client_memory="0.5G"',
    'site.merge_disk="2TB"', f"workflow.retries={MAX_RETRIES}", "workflow.retries=0",
    f"client.max_reconnects={MAX_RETRIES}", "model.input_scale=1e-30",
    'data.channels=["H1:GDS-CALIB_STRAIN", "L1:GDS-CALIB_STRAIN"]',
    'data.witnesses=["H1:PEM-SYNTH_WITNESS_0"]',
])
def test_a_good_value_of_each_key_is_a_campaign(setting: str, small_config_file: Path) -> None:
    section, key, value = parse_override(setting)
    config = load_config(small_config_file, [setting])
    assert plain_value(getattr(getattr(config, section), key)) == value


def test_a_channel_listed_twice_is_named_with_its_quotes(
        small_config_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The message quotes the name as ``repr`` writes it (it named it bare: a name with a line
    break or a trailing space read as another)."""
    code = main(["check", str(small_config_file), "--set",
                 'data.witnesses=["H1:PEM-SYNTH_WITNESS_0", "H1:PEM-SYNTH_WITNESS_0"]'])
    [line] = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and line.endswith(
        "'data.witnesses' lists the channel 'H1:PEM-SYNTH_WITNESS_0' twice"), line


# ---- data.datafind_server ------------------------------------------------------------------


def datafind_config(root: Path, server: str) -> Path:
    """SMALL_CAMPAIGN with its frames from ``server`` instead of a directory."""
    path = root / "datafind.toml"
    path.write_text(SMALL_CAMPAIGN.replace(
        'frames = "frames"', f'datafind_server = "{server}"\nframetypes = ["H1_SYNTH"]'))
    return path


@pytest.mark.parametrize(("server", "why"), [
    ("http//x", "a path needs the scheme"),
    ("ht!tp://x", "the scheme must be http or https"),
    ("ftp://datafind.ligo.org", "the scheme must be http or https"),
    ("https://", "no host"),
    ("http://127.0.0.1:99999", "Port out of range"),
    ("datafind.ligo.org:http", "Port could not be cast"),
    ("datafind.ligo.org:", "a port is 1 to 65535"),
    ("http://999.1.1.1:80", "'999.1.1.1' is no host name or address"),
    ("http://[::1:80", "Invalid IPv6 URL"),
    ("http://dat_afind.org", "is no host name or address"),
    ("https://host/api?x=1", "no query"),
    ("https://user@host", "no query, fragment or user name"),
    ("https://host\n", "white space"),
])
def test_a_malformed_datafind_server_is_refused_naming_the_key(
        server: str, why: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before, ``check`` asked the server and failed at run time, exit 3, naming the server
    ("No connection adapters were found for 'ht!tp://x/api/v1/...'")."""
    config = datafind_config(tmp_path, server.replace("\n", "\\n"))
    code = main(["check", str(config)])
    [line] = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "'data.datafind_server'" in line and why in line, line
    if server == "http//x":
        documented("datafind-server-malformed", cli_error(line), {config: "<ws>/datafind.toml"},
                   exit_code=code)


@pytest.mark.parametrize("server", [
    "http://127.0.0.1:8080", "https://datafind.ligo.org", "https://datafind.ligo.org/",
    "datafind.ligo.org:443", "datafind.ligo.org", "localhost:80", "http://[::1]:8080/path",
    "https://datafind.igwn.org.",
])
def test_a_datafind_server_gwdatafind_takes_is_a_campaign(server: str, tmp_path: Path) -> None:
    assert datafind_problem(server) is None
    assert load_config(datafind_config(tmp_path, server)).data.datafind_server == server


def test_the_forms_tell_an_address_from_a_name() -> None:
    """``999.1.1.1`` is neither an IPv4 address nor a host name (a name's last label is not
    all digits); ``localhost`` is a name, which the server cannot bind (the control: an
    address it can)."""
    assert bind_problem("127.0.0.1") is None and bind_problem("0.0.0.0") is None
    assert bind_problem("999.1.1.1") == "not an address"
    assert "host name" in (bind_problem("node-1.cluster.org") or "")
    assert "IPv6" in (bind_problem("::") or "")
    assert bind_problem("127.0.0.1 ") == "not an address"


# ---- data.segments -------------------------------------------------------------------------


def test_a_segment_file_that_is_no_regular_file_is_named_as_what_it_is(tmp_path: Path) -> None:
    """``/dev/null``, a named pipe (not opened: it would wait for a writer) and a link that
    leads nowhere were each "does not exist"; a regular file reads (the control)."""
    fifo = tmp_path / "segments.fifo"
    os.mkfifo(fifo)
    (tmp_path / "nowhere.txt").symlink_to(tmp_path / "gone.txt")
    cases = {Path(os.devnull): "is a character device, not a regular file",
             fifo: "is a FIFO (named pipe), not a regular file",
             tmp_path: "is a directory, not a regular file",
             tmp_path / "nowhere.txt": "is a symbolic link that leads nowhere",
             tmp_path / "none.txt": "does not exist"}
    for path, what in cases.items():
        with pytest.raises(DataError) as err:
            read_segment_file(path)
        assert str(err.value) == f"segment file {path} {what}"
    good = tmp_path / "segments.txt"
    good.write_text("100 200\n")
    assert [tuple(s) for s in read_segment_file(good)] == [(100, 200)]


def test_check_names_a_device_given_as_the_segment_file(
        small_campaign_dir, capsys: pytest.CaptureFixture[str]) -> None:
    ws = small_campaign_dir(export=False)
    code = main(["check", str(ws / "campaign.toml"), "--set", f'data.segments="{os.devnull}"'])
    [line] = capsys.readouterr().err.strip().splitlines()
    assert code == 3 and "character device" in line, line
    documented("segment-file-not-regular", cli_error(line), exit_code=code)
    good = ws / "segments.txt"
    good.write_text("1262304000 1262304064\n")
    assert main(["check", str(ws / "campaign.toml"), "--set", f'data.segments="{good}"']) == 0
