"""The bad-input catalogue (docs/errors.md): every case through the real command line.

Each case prepares a workspace (a copy of a small campaign: config, GWF frames, model
repository, and a run directory where the case needs one), breaks one thing, runs
``python -m offline_iaas.cli ...`` and checks: the documented exit code, one line on stderr
(``check`` lists several problems one per line under a summary line) naming the offending
file, key, channel or node, no traceback, and no file that existed before changed or deleted
(nor a temporary file left behind). Cases that need a simulated failure (a full disk, no free
port) run in-process in test_bad_input_simulated.py.

Each case's whole message is checked against its row of docs/errors.md (the row's id is the
case's id; ``tests/error_catalogue.documented``).
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from offline_iaas.client.part import PartWriter
from offline_iaas.config import load_config
from offline_iaas.job_specs import read_client_job
from offline_iaas.rundir import RunDir
from offline_iaas.workflow.make_dag import make_dag
from tests.error_catalogue import documented
from tests.helpers import SMALL_CAMPAIGN, file_hashes, processes_mentioning

H_FILE = "H-H1_SYNTH-1262304032-16.gwf"
L_FILE = "L-L1_SYNTH-1262304032-16.gwf"
STRAIN = "H1:GDS-CALIB_STRAIN"
NO_REPO = 'model.repository="none"'
"""check skips a repository that is not there: no export fits a case's channels or rate."""


@pytest.fixture(scope="module")
def base(small_campaign_dir) -> Path:
    """The small campaign, its frames and its model repository (copied by each case)."""
    return small_campaign_dir()


# ---- helpers that break things ----------------------------------------------------------------


def run_dir(ws: Path, *overrides: str, name: str = "run") -> Path:
    """make-dag of the workspace's campaign (in-process) into ``ws/name``."""
    make_dag(load_config(ws / "campaign.toml", list(overrides)), RunDir(ws / name))
    return ws / name


def fake_parts(run: Path) -> None:
    """Complete, checksummed parts for every client (made-up statistics, no server)."""
    config = load_config(run / "campaign.toml")
    for node in json.loads((run / "run.json").read_text())["clients"]:
        segment = read_client_job(RunDir(run), node)
        writer = PartWriter(RunDir(run), segment, ("statistic",), config.stream_hash())
        for number, piece in enumerate(segment.pieces):
            rows = np.arange(piece.windows, dtype=np.float32) + 1000 * segment.index
            writer.write_checkpoint(number, 0, {"statistic": rows})
        writer.commit()


def set_sample(path: Path, channel: str, gps: float, value: float) -> None:
    """Rewrite a GWF file with one sample of ``channel`` replaced."""
    from gwpy.io.gwf import get_channel_names
    from gwpy.timeseries import TimeSeriesDict

    data = TimeSeriesDict.read(path, get_channel_names(str(path)), format="gwf")
    series = data[channel]
    series.value[int(round((gps - series.t0.value) * series.sample_rate.value))] = value
    data.write(path, format="gwf")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# ---- the catalogue ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One bad input: how to make it, the command, and what the error must say."""

    id: str
    code: int
    setup: Callable[[Path], list[str]]
    """Breaks the workspace; returns the command's arguments (``{ws}`` is not expanded)."""
    names: Callable[[Path], list[str]]
    """Fragments the message must contain (the offending file, key, channel ...)."""
    lines: int = 1
    """Lines on stderr."""
    placeholders: Callable[[Path], dict[str, str]] = lambda ws: {}
    """What of this run the catalogue shows as a placeholder, besides the workspace ``<ws>``."""
    set_aside: tuple[str, ...] = ()
    """Files (relative to the workspace) the command sets aside as ``<name>.damaged``, their
    bytes kept (``completeness.set_aside``: a checksum that fails)."""


def _config_case(id: str, overrides: list[str], *fragments: str, in_file: bool = True) -> Case:
    """make-dag with ``--set`` overrides; the message names the config file if ``in_file``."""

    def setup(ws: Path) -> list[str]:
        sets = [arg for o in overrides for arg in ("--set", o)]
        return ["make-dag", str(ws / "campaign.toml"), *sets, "--out", str(ws / "run")]

    return Case(id, 2, setup,
                lambda ws: [str(ws / "campaign.toml"), *fragments] if in_file else [*fragments])


def _hash(directory: Path, *overrides: str) -> str:
    """The stream hash of the campaign in ``directory`` (with ``--set`` overrides)."""
    return load_config(directory / "campaign.toml", list(overrides)).stream_hash()


def _datafind_port(ws: Path) -> str:
    """The closed port the datafind case's config names."""
    text = (ws / "datafind.toml").read_text()
    return text.split("http://127.0.0.1:", 1)[1].split('"', 1)[0]


def _datafind_config(ws: Path) -> list[str]:
    text = SMALL_CAMPAIGN.replace(
        'frames = "frames"',
        f'datafind_server = "http://127.0.0.1:{closed_port()}"\n'
        'frametypes = ["H1_SYNTH", "L1_SYNTH"]',
    )
    return ["check", str(write(ws / "datafind.toml", text))]


def _missing_model(ws: Path) -> list[str]:
    run = run_dir(ws)
    shutil.rmtree(ws / "model-repository" / "offline-iaas")
    return ["serve", "--run-dir", str(run), "--node", "server0"]


def _wrong_weights(ws: Path) -> list[str]:
    import torch

    torch.save(torch.nn.Linear(3, 2).state_dict(), ws / "other-net.pt")
    return ["export", str(ws / "campaign.toml"), "--weights", str(ws / "other-net.pt")]


def _other_campaign_run(ws: Path) -> list[str]:
    run_dir(ws)
    return ["make-dag", str(ws / "campaign.toml"), "--set", "model.seed=7", "--out",
            str(ws / "run")]


def _corrupt_part(ws: Path) -> list[str]:
    import h5py

    run = run_dir(ws)
    fake_parts(run)
    with h5py.File(run / "parts" / "client1.h5", "r+") as f:
        f["statistic/0"][5] = -1.0
    for name in ("shard0.h5", "shard0.json"):  # an earlier merge's, kept when this fails
        write(run / "output" / "shards" / name, f"earlier {name}")
    return ["merge-shard", "--run-dir", str(run), "--node", "shard0"]


def _foreign_part(ws: Path) -> list[str]:
    run = run_dir(ws)
    fake_parts(run)
    other = run_dir(ws, "model.seed=7", name="other-run")  # same plan, other campaign
    fake_parts(other)
    for suffix in (".h5", ".json"):
        shutil.copy2(other / "parts" / f"client0{suffix}", run / "parts" / f"client0{suffix}")
    return ["merge-shard", "--run-dir", str(run), "--node", "shard0"]


def _bind_elsewhere(ws: Path) -> list[str]:
    run = run_dir(ws, 'server.bind="192.0.2.1"')
    return ["serve", "--run-dir", str(run), "--node", "server0"]


def _nan_in_frames(ws: Path) -> list[str]:
    set_sample(ws / "frames" / H_FILE, STRAIN, 1262304040.5, float("nan"))
    write(ws / "reference.h5", "an earlier result, kept when this run fails")
    return ["reference", str(ws / "campaign.toml"), "--out", str(ws / "reference.h5")]


def _inf_at_file_start(ws: Path) -> list[str]:
    set_sample(ws / "frames" / L_FILE, "L1:GDS-CALIB_STRAIN", 1262304032.25, float("inf"))
    return ["check", str(ws / "campaign.toml")]


def _corrupt_gwf(ws: Path) -> list[str]:
    path = ws / "frames" / H_FILE
    path.write_bytes(np.random.default_rng(1).bytes(path.stat().st_size))
    return ["check", str(ws / "campaign.toml")]


def _inspect_corrupt_gwf(ws: Path) -> list[str]:
    _corrupt_gwf(ws)
    return ["inspect", str(ws / "frames" / H_FILE)]


def _truncated_gwf(ws: Path) -> list[str]:
    path = ws / "frames" / L_FILE
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return ["check", str(ws / "campaign.toml")]


def _hole_in_frames(ws: Path) -> list[str]:
    (ws / "frames" / H_FILE).unlink()
    return _check(ws)


def _missing_model_reference(ws: Path) -> list[str]:
    shutil.rmtree(ws / "model-repository" / "offline-iaas")
    return ["reference", str(ws / "campaign.toml"), "--out", str(ws / "r.h5")]


def _injection_case(ws: Path, injections: Path) -> list[str]:
    """make-dag of the workspace in mode bbhnet with ``injections`` as the list (refused
    before the repository, a classifier's, is looked at)."""
    return ["make-dag", str(ws / "campaign.toml"), "--set", 'model.mode="bbhnet"', "--set",
            f'search.injections="{injections}"', "--out", str(ws / "run")]


def _truncated_injections(ws: Path) -> list[str]:
    data = (ws / "frames" / "injections.h5").read_bytes()
    return _injection_case(ws, write_bytes(ws / "cut.h5", data[: len(data) // 2]))


def _injections_without_column(ws: Path) -> list[str]:
    import h5py

    shutil.copy2(ws / "frames" / "injections.h5", ws / "no-time.h5")
    with h5py.File(ws / "no-time.h5", "r+") as f:
        del f["parameters/injection_time"]
    return _injection_case(ws, ws / "no-time.h5")


def _injections_column_of_strings(ws: Path) -> list[str]:
    import h5py

    shutil.copy2(ws / "frames" / "injections.h5", ws / "ra-text.h5")
    with h5py.File(ws / "ra-text.h5", "r+") as f:
        count = len(f["parameters/ra"])
        del f["parameters/ra"]
        f["parameters/ra"] = np.array([b"12h30m"] * count)
    return _injection_case(ws, ws / "ra-text.h5")


def write_bytes(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _dag_cut_short(ws: Path) -> list[str]:
    """offline.dag cut on a line boundary before the merge node (a copy that stopped early)."""
    run = run_dir(ws)
    lines = (run / "offline.dag").read_text().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if line.startswith("JOB merge "))
    (run / "offline.dag").write_text("".join(lines[:cut]))
    return ["status", str(run)]


def _dag_emptied(ws: Path) -> list[str]:
    """offline.dag emptied (a copy that wrote nothing): it holds no node, so would run none."""
    run = run_dir(ws)
    (run / "offline.dag").write_text("")
    return ["run-local", str(run)]


def _dag_cut_in_its_header(ws: Path) -> list[str]:
    """offline.dag cut 30 bytes in, within make-dag's header line."""
    run = run_dir(ws)
    (run / "offline.dag").write_bytes((run / "offline.dag").read_bytes()[:30])
    return ["status", str(run)]


def _job_spec_damaged(ws: Path) -> list[str]:
    run = run_dir(ws)
    (run / "jobs" / "shard0.json").write_text("{\n")
    return ["merge-shard", "--run-dir", str(run), "--node", "shard0"]


def _job_spec_deleted(ws: Path) -> list[str]:
    run = run_dir(ws)
    (run / "jobs" / "client1.json").unlink()
    return ["client", "--run-dir", str(run), "--node", "client1"]


def _job_spec_not_text(ws: Path) -> list[str]:
    run = run_dir(ws)
    (run / "jobs" / "client0.json").write_bytes(b"\xff\xfe{")
    return ["client", "--run-dir", str(run), "--node", "client0"]


def _injections_into_a_directory(ws: Path) -> list[str]:
    (ws / "out.h5").mkdir()
    return ["convert-injections", str(ws / "frames" / "injections.h5"), str(ws / "out.h5")]


def _reference_into_a_directory(ws: Path) -> list[str]:
    (ws / "ref.h5").mkdir()  # named as an output is (reference --out refuses other suffixes)
    return ["reference", str(ws / "campaign.toml"), "--out", str(ws / "ref.h5")]


def _check(ws: Path, *overrides: str) -> list[str]:
    return ["check", str(ws / "campaign.toml"), *[a for o in overrides for a in ("--set", o)]]


CASES: list[Case] = [
    # ---- config: exit 2 ----
    Case("config-not-found", 2, lambda ws: ["check", str(ws / "nowhere.toml")],
         lambda ws: [f"{ws / 'nowhere.toml'}: config file not found"]),
    Case("config-not-text", 2,
         lambda ws: ["check", str(write_bytes(ws / "latin.toml", b"\xff\xfe[data]\n"))],
         lambda ws: [f"{ws / 'latin.toml'}: cannot read the config file"]),
    Case("config-is-a-directory", 2, lambda ws: ["check", str(ws / "frames")],
         lambda ws: [f"{ws / 'frames'}: cannot read the config file"]),
    Case("config-not-toml", 2, lambda ws: ["check", str(write(ws / "bad.toml", "[data\n"))],
         lambda ws: [f"{ws / 'bad.toml'}: not valid TOML"]),
    Case("unknown-section", 2,
         lambda ws: ["check", str(write(ws / "c.toml", SMALL_CAMPAIGN + "\n[colour]\nx = 1\n"))],
         lambda ws: [str(ws / "c.toml"), "unknown section [colour]"]),
    _config_case("unknown-key", ["data.colour=red"], "unknown key 'data.colour'"),
    _config_case("wrong-type", ['model.batch_size="eight"'],
                 "'model.batch_size' must be an integer, got 'eight'"),
    Case("missing-key", 2,
         lambda ws: ["check", str(write(ws / "c.toml",
                                        SMALL_CAMPAIGN.replace("start = 1262304000\n", "")))],
         lambda ws: [str(ws / "c.toml"), "missing required key 'data.start'"]),
    _config_case("malformed-override", ["layout.servers"],
                 "override 'layout.servers' is not of the form section.key=value",
                 in_file=False),
    _config_case("negative-duration", ["data.duration=-64"],
                 "'data.duration' must not be negative, got -64"),
    _config_case("kernel-shorter-than-stride", ["model.kernel_seconds=0.125"],
                 "'model.kernel_seconds' (0.125 s) must not be shorter than the stride (0.25 s)"),
    _config_case("stride-not-dividing-rate", ["model.inference_rate=3"],
                 "'model.inference_rate' (3.0 Hz) must divide data.sample_rate (256.0 Hz)"),
    _config_case("channel-without-ifo", ['data.channels=["STRAIN"]'],
                 "'data.channels' entry 'STRAIN' is not of the form IFO:NAME"),
    _config_case("more-clients-than-windows", ["layout.servers=300"],
                 "holds 256 windows, fewer than the 600 client shares"),
    _config_case("accounting-group-malformed",
                 ['site.profile="ldg"', 'site.accounting_group="physics.bbh"'],
                 "'site.accounting_group' 'physics.bbh' is not an IGWN accounting tag"),
    _config_case("accounting-group-missing", ['site.profile="ldg"'],
                 "'site.accounting_group' is required with site.profile = \"ldg\""),
    # ---- data: exit 3 ----
    Case("frame-source-missing", 3, lambda ws: _check(ws, f'data.frames="{ws / "nowhere"}"'),
         lambda ws: [f"frame source {ws / 'nowhere'} does not exist"]),
    Case("empty-cache", 3,
         lambda ws: _check(ws, f'data.frames="{write(ws / "empty.lcf", "")}"'),
         lambda ws: [f"frame cache {ws / 'empty.lcf'} lists no frame files"]),
    Case("malformed-cache-line", 3,
         lambda ws: _check(ws, f'data.frames="{write(ws / "x.lcf", "H H1_SYNTH 1262304000")}"'),
         lambda ws: [f"{ws / 'x.lcf'}, line 1: malformed LAL cache line"]),
    Case("missing-channel", 3,
         lambda ws: _check(ws, f'data.channels=["{STRAIN}", "L1:NO-SUCH_CHANNEL"]', NO_REPO),
         lambda ws: ["channel L1:NO-SUCH_CHANNEL not found in",
                     str(ws / "frames" / "L-L1_SYNTH-1262304000-16.gwf")]),
    Case("missing-witness-channel", 3,
         lambda ws: _check(ws, 'model.mode="deepclean"', 'data.witnesses=['
                           '"H1:PEM-SYNTH_WITNESS_0", "L1:PEM-SYNTH_WITNESS_9"]', NO_REPO),
         lambda ws: ["channel L1:PEM-SYNTH_WITNESS_9 not found in "
                     f"{ws / 'frames' / 'L-L1_SYNTH-1262304000-16.gwf'}"]),
    Case("train-demo-missing-witness", 3,
         lambda ws: ["train-demo", str(ws / "campaign.toml"), "--out", str(ws / "weights"),
                     "--set", 'data.witnesses=["H1:PEM-SYNTH_WITNESS_0", "L1:PEM-SYNTH_W_9"]'],
         lambda ws: ["channel L1:PEM-SYNTH_W_9 not found in "
                     f"{ws / 'frames' / 'L-L1_SYNTH-1262304000-16.gwf'}"]),
    Case("wrong-sample-rate", 3,
         lambda ws: _check(ws, f'data.channels=["{STRAIN}"]', "data.sample_rate=512", NO_REPO),
         lambda ws: [f"channel {STRAIN} in {ws / 'frames' / 'H-H1_SYNTH-1262304000-16.gwf'}",
                     "has sample rate 256 Hz, not a whole multiple of the model sample rate "
                     "512 Hz"]),
    Case("several-problems", 3, lambda ws: _check(ws, "data.sample_rate=512", NO_REPO),
         lambda ws: ["2 problems with the frame data", "channel H1:GDS-CALIB_STRAIN",
                     "channel L1:GDS-CALIB_STRAIN"], lines=3),
    Case("corrupt-gwf", 3, _corrupt_gwf,
         lambda ws: [f"frame file {ws / 'frames' / H_FILE} [1262304032, 1262304048) is "
                     "unreadable"]),
    Case("truncated-gwf", 3, _truncated_gwf,
         lambda ws: [f"frame file {ws / 'frames' / L_FILE} [1262304032, 1262304048) is "
                     "unreadable"]),
    Case("hole-in-frames", 3,
         _hole_in_frames,
         lambda ws: ["no frame data for observatory H (H1:GDS-CALIB_STRAIN) in "
                     "[1262304032, 1262304048)"]),
    Case("nan-in-frames", 3, _nan_in_frames,
         lambda ws: [f"channel {STRAIN} in {ws / 'frames' / H_FILE}: non-finite sample (nan) "
                     "at GPS 1262304040.5"]),
    Case("inf-in-frames-check", 3, _inf_at_file_start,
         lambda ws: [f"frame file {ws / 'frames' / L_FILE}",
                     "[1262304032, 1262304048) channel L1:GDS-CALIB_STRAIN: non-finite sample "
                     "(inf) at GPS 1262304032.25"]),
    Case("datafind-unreachable", 3, _datafind_config,
         lambda ws: ["datafind server http://127.0.0.1:", "failed to list frame type H1_SYNTH"],
         placeholders=lambda ws: {f":{_datafind_port(ws)}": ":<port>",
                                  f"port={_datafind_port(ws)}": "port=<port>"}),
    Case("segment-file-malformed", 3,
         lambda ws: _check(ws, f'data.segments="{write(ws / "seg.txt", "start end")}"'),
         lambda ws: [str(ws / "seg.txt")]),
    Case("inspect-not-a-gwf", 3, _inspect_corrupt_gwf,
         lambda ws: [f"{ws / 'frames' / H_FILE}: not a GWF file"]),
    Case("inspect-raw-frame", 3, lambda ws: ["inspect", str(ws / "frames" / H_FILE)],
         lambda ws: [f"{ws / 'frames' / H_FILE}: no offline-iaas frame history entry"]),
    Case("injection-list-missing", 2, lambda ws: _injection_case(ws, ws / "nowhere.json"),
         lambda ws: [f"search.injections: injection file {ws / 'nowhere.json'} does not exist"]),
    Case("injection-list-truncated", 3, _truncated_injections,
         lambda ws: [f"search.injections: {ws / 'cut.h5'}: not a readable HDF5 file"]),
    Case("injection-list-not-text", 2,
         lambda ws: _injection_case(ws, write_bytes(ws / "latin.json", b"\xff\xfe[")),
         lambda ws: [f"search.injections: {ws / 'latin.json'}: cannot read"]),
    Case("injection-list-without-column", 3, _injections_without_column,
         lambda ws: [f"search.injections: {ws / 'no-time.h5'}: injection file has no column "
                     "'parameters/injection_time'"]),
    Case("injection-list-column-of-strings", 3, _injections_column_of_strings,
         lambda ws: [f"search.injections: {ws / 'ra-text.h5'}: column 'parameters/ra' holds "
                     "text, not numbers"]),
    # ---- models: exit 4 ----
    Case("model-missing-from-repository", 4, _missing_model,
         lambda ws: [f"{ws / 'model-repository' / 'offline-iaas' / '1' / 'classifier.onnx'}: "
                     "the classifier graph is missing: export again"]),
    Case("model-missing-reference", 4,
         _missing_model_reference,
         lambda ws: [f"{ws / 'model-repository'}: no classifier graph"]),
    Case("repository-shape-mismatch", 4,
         lambda ws: ["reference", str(ws / "campaign.toml"), "--set", "model.kernel_seconds=2",
                     "--out", str(ws / "r.h5")],
         lambda ws: [f"model repository {ws / 'model-repository'}: exported for windows of 256 "
                     "samples (kernel_samples), the campaign's are 512 (model.kernel_seconds)"]),
    Case("export-over-another-shape", 4,
         lambda ws: ["export", str(ws / "campaign.toml"), "--set", "model.kernel_seconds=2"],
         lambda ws: [f"{ws / 'model-repository'}: repository holds mode 'classifier'"]),
    Case("not-a-repository", 4,
         lambda ws: ["reference", str(ws / "campaign.toml"), "--set",
                     f'model.repository="{ws / "frames"}"', "--out", str(ws / "r.h5")],
         lambda ws: [f"{ws / 'frames'}: not a model repository written by offline-iaas export"]),
    Case("weights-wrong-architecture", 4, _wrong_weights,
         lambda ws: [f"{ws / 'other-net.pt'}: not a classifier state_dict"]),
    Case("weights-not-found", 4,
         lambda ws: ["export", str(ws / "campaign.toml"), "--weights", str(ws / "none.pt")],
         lambda ws: [f"{ws / 'none.pt'}: weight file not found"]),
    Case("weights-empty-file", 4,
         lambda ws: ["export", str(ws / "campaign.toml"), "--weights",
                     str(write(ws / "empty.pt", ""))],
         lambda ws: [f"{ws / 'empty.pt'}: not a torch state_dict"]),
    # ---- servers: exit 5 ----
    Case("bind-address-not-on-this-host", 5, _bind_elsewhere,
         lambda ws: ["cannot get a free port on '192.0.2.1' (server.bind)"]),
    # ---- run directories: exit 6 ----
    Case("run-directory-of-another-campaign", 6, _other_campaign_run,
         lambda ws: [f"{ws / 'run'} already holds the DAG of another campaign"],
         placeholders=lambda ws: {
             _hash(ws / "run"): "<hash of the run>",
             _hash(ws, "model.seed=7"): "<hash of this campaign>"}),
    Case("not-a-run-directory", 6, lambda ws: ["run-local", str(ws)],
         lambda ws: [f"{ws} holds no offline.dag"]),
    Case("dag-cut-short", 6, _dag_cut_short,
         lambda ws: [f"{ws / 'run' / 'offline.dag'} lacks node(s) merge, final"]),
    Case("dag-empty", 6, _dag_emptied, lambda ws: [
        f"{ws / 'run' / 'offline.dag'} lacks node(s) server0, client0, client1, shard0, merge"]),
    Case("dag-cut-in-its-header", 6, _dag_cut_in_its_header, lambda ws: [
        f"{ws / 'run' / 'offline.dag'} lacks node(s) server0, client0, client1, shard0, merge"]),
    Case("node-not-a-run-directory", 6,
         lambda ws: ["merge-shard", "--run-dir", str(ws / "runn"), "--node", "shard0"],
         lambda ws: [f"{ws / 'runn'} holds no offline.dag (not a run directory"]),
    Case("job-spec-damaged", 6, _job_spec_damaged,
         lambda ws: [f"{ws / 'run' / 'jobs' / 'shard0.json'}: not a JSON document",
                     f"restore it with 'offline-iaas make-dag {ws / 'run' / 'campaign.toml'} "
                     f"--out {ws / 'run'}'"]),
    Case("job-spec-deleted", 6, _job_spec_deleted,
         lambda ws: [f"{ws / 'run' / 'jobs' / 'client1.json'}: no job spec for node client1: "
                     "restore it with"]),
    Case("job-spec-not-text", 6, _job_spec_not_text,
         lambda ws: [f"{ws / 'run' / 'jobs' / 'client0.json'}: cannot read"]),
    Case("make-dag-into-other-files", 6,
         lambda ws: ["make-dag", str(ws / "campaign.toml"), "--out", str(ws / "frames")],
         lambda ws: [f"{ws / 'frames'} is not a run directory of make-dag and not empty"]),
    Case("export-into-other-files", 6, lambda ws: ["export", str(ws / "campaign.toml"),
                                                   "--set", f'model.repository="{ws / "frames"}"'],
         lambda ws: [f"{ws / 'frames'} is not a model repository of export and not empty"]),
    Case("report-not-a-run-directory", 6, lambda ws: ["report", str(ws / "runn")],
         lambda ws: [f"{ws / 'runn'} holds no offline.dag (not a run directory"]),
    Case("injection-output-is-a-directory", 2, _injections_into_a_directory,
         lambda ws: [f"{ws / 'out.h5'} is a directory, not a regular file"]),
    Case("output-is-a-directory", 6, _reference_into_a_directory,
         lambda ws: [f"Is a directory: {ws / 'ref.h5'}"]),
    Case("output-not-writable", 6,
         lambda ws: ["reference", str(ws / "campaign.toml"), "--out", "/proc/offline-iaas.h5"],
         lambda ws: ["cannot write the reference output /proc/offline-iaas.h5"]),
    Case("unknown-node", 6,
         lambda ws: ["client", "--run-dir", str(run_dir(ws)), "--node", "client9"],
         lambda ws: ["client9 is not a node of this run (this run's clients: client0, "
                     "client1)"]),
    Case("node-of-another-kind", 6,
         lambda ws: ["merge-shard", "--run-dir", str(run_dir(ws)), "--node", "client0"],
         lambda ws: ["client0 is a client node, not a shard merge (this run's shard merges: "
                     "shard0)"]),
    Case("unknown-shard-node", 6,
         lambda ws: ["merge-shard", "--run-dir", str(run_dir(ws)), "--node", "shard7"],
         lambda ws: ["shard7 is not a node of this run (this run's shard merges: shard0)"]),
    Case("prescript-server-node", 6,
         lambda ws: ["prescript", "--run-dir", str(run_dir(ws)), "--node", "server0"],
         lambda ws: ["server0 is a server node, not a client (this run's clients: client0, "
                     "client1)"]),
    Case("merge-part-missing", 6,
         lambda ws: ["merge-shard", "--run-dir", str(run_dir(ws)), "--node", "shard0"],
         lambda ws: ["client0: part missing (no parts/client0.json)",
                     "client1: part missing"]),
    Case("merge-shards-not-merged", 6, lambda ws: ["merge", "--run-dir", str(run_dir(ws))],
         lambda ws: ["cannot index the shard merges",
                     "shard0: shard merge not done (no output/shards/shard0.json)"]),
    Case("merge-part-wrong-checksum", 6, _corrupt_part,
         lambda ws: ["client1: parts/client1.h5 changed after it was written (checksum "
                     "mismatch; set aside as parts/client1.h5.damaged)"],
         set_aside=("run/parts/client1.h5",)),
    Case("merge-part-of-another-campaign", 6, _foreign_part,
         lambda ws: ["client0: part from another campaign's config (stream hash"],
         placeholders=lambda ws: {_hash(ws / "other-run"): "<hash of the other campaign>",
                                  _hash(ws / "run"): "<hash of this campaign>"}),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, base: Path, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    shutil.copytree(base, ws)
    args = case.setup(ws)
    before = file_hashes(ws)
    result = subprocess.run(
        [sys.executable, "-m", "offline_iaas.cli", *args],
        capture_output=True, text=True, timeout=300,
    )
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == case.code, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == case.lines, result.stderr
    prefix = f"offline-iaas {args[0]}: error: "
    assert lines[0].startswith(prefix), lines[0]
    for fragment in case.names(ws):
        assert fragment in result.stderr, f"{fragment!r} not in {result.stderr!r}"
    documented(case.id, result.stderr.strip().removeprefix(prefix),
               {ws: "<ws>", **case.placeholders(ws)}, exit_code=result.returncode)
    after = file_hashes(ws)
    for path in case.set_aside:  # moved, not lost
        assert after.get(f"{path}.damaged") == before[path] and path not in after, path
        after[path] = after.pop(f"{path}.damaged")
    changed = sorted(p for p in before if after.get(p) != before[p])
    assert changed == [], f"changed or deleted: {changed}"
    leftovers = sorted(p for p in set(after) - set(before) if p.endswith(".tmp"))
    assert leftovers == [], f"temporary files left: {leftovers}"
    assert processes_mentioning(str(ws)) == []


@pytest.mark.parametrize("fault", ["damaged", "deleted"])
def test_the_command_a_damaged_or_deleted_job_spec_names_writes_it_again(
        base: Path, tmp_path: Path, capsys: pytest.CaptureFixture, fault: str) -> None:
    """The make-dag command the message gives, run as given, writes the job spec again and
    keeps the finished parts; the node then reads its spec."""
    import re
    import shlex

    from offline_iaas.cli import main
    from offline_iaas.job_specs import read_shard_job

    ws = tmp_path / "ws"
    shutil.copytree(base, ws)
    run = run_dir(ws)
    fake_parts(run)
    spec = run / "jobs" / "shard0.json"
    written, parts = spec.read_bytes(), file_hashes(run / "parts")
    if fault == "damaged":
        spec.write_text("{\n")
    else:
        spec.unlink()
    capsys.readouterr()
    assert main(["merge-shard", "--run-dir", str(run), "--node", "shard0"]) == 6
    message = capsys.readouterr().err.strip().splitlines()[-1]
    found = re.search(r"restore it with '([^']+)'", message)
    assert found is not None, message
    words = shlex.split(found.group(1))
    assert words[0] == "offline-iaas" and main(words[1:]) == 0
    assert spec.read_bytes() == written and file_hashes(run / "parts") == parts
    assert read_shard_job(RunDir(run), "shard0").clients == ("client0", "client1")
