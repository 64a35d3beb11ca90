"""Shared test helpers: a small campaign, the package's log lines, and a finder for processes
a test started."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from offline_iaas.logs import PACKAGE, shown_by
from offline_iaas.rundir import RunDir


@contextmanager
def package_level(level: int = logging.INFO) -> Iterator[logging.Logger]:
    """The package's logger at ``level`` while inside (what ``logs.configure`` sets)."""
    logger = logging.getLogger(PACKAGE)
    saved = logger.level
    logger.setLevel(level)
    try:
        yield logger
    finally:
        logger.setLevel(saved)


@contextmanager
def captured_log(lines: list[str] | None = None) -> Iterator[list[str]]:
    """The package's log lines (info and above) while inside, appended to ``lines``."""
    lines = [] if lines is None else lines
    with package_level(), shown_by(lines.append):
        yield lines

SMALL_CAMPAIGN = """
[data]
frames = "frames"
channels = ["H1:GDS-CALIB_STRAIN", "L1:GDS-CALIB_STRAIN"]
start = 1262304000
duration = 64
sample_rate = 256

[synth]
file_duration = 16
frame_sample_rate = 256
injections = 1

[model]
repository = "model-repository"
kernel_seconds = 1.0
inference_rate = 4
batch_size = 8

[layout]
servers = 1
clients_per_server = 2
"""


WITNESSES = '["H1:PEM-SYNTH_WITNESS_0", "H1:PEM-SYNTH_WITNESS_1", "L1:PEM-SYNTH_WITNESS_0"]'
"""``data.witnesses`` for SMALL_CAMPAIGN's frames in the DeepClean modes (2 for H1, 1 for L1)."""


STRAIN_SCALE = 5e-19
"""DeepClean's output scale in the test weights: ten times the standard deviation of
SMALL_CAMPAIGN's synthetic strain at 256 Hz (4.4e-20 and 4.5e-20), so that the band-passed
prediction, a small part of it, is of the strain's size in the band (with 5e-20 a witness one
sample late moved the cleaned strain by 2e-4 of its largest value, with 2e-19 by 8e-4;
``tests/test_weights_see_the_data.py``)."""


def untrained_weights(directory: Path, whitening_taps: int = 33, seed: int = 3) -> Path:
    """Freshly initialised ``deepclean-H1/L1.pt`` (for ``WITNESSES``) and ``bbhnet.pt``, with
    non-trivial BatchNorm statistics, as ``export --weights`` takes them."""
    import torch

    from offline_iaas.models.weights import build_network

    directory.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    for ifo, witnesses in (("H1", 2), ("L1", 1)):
        net = build_network("deepclean", {"witnesses": witnesses})
        for module in net.modules():
            if isinstance(module, torch.nn.BatchNorm1d):
                module.running_mean.uniform_(-0.1, 0.1)
        # a prediction scaled for strain (with 1 it would dwarf the strain, ~5e-20 here, and
        # the cleaned strain, and BBHnet's statistic on it, would not see the strain)
        net.strain_std.fill_(STRAIN_SCALE)
        torch.save(net.state_dict(), directory / f"deepclean-{ifo}.pt")
    bbhnet = build_network("bbhnet", {"ifos": 2}, whitening_taps=whitening_taps)
    # strain is ~1e-21: unscaled, the untrained network sees zeros and answers a constant
    # (every comparison of its statistic would pass whatever the windows)
    bbhnet.input_scale.fill_(1e21)
    torch.save(bbhnet.state_dict(), directory / "bbhnet.pt")
    return directory


def processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes (other than zombies) that contain ``text``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError, PermissionError, IndexError):
            continue
        if text in cmdline and state != "Z":
            found.append(f"{proc.name}: {cmdline.strip()}")
    return found


def skip_data_check(monkeypatch, error: Exception | None = None) -> list:
    """Replace the frame preflight and the repository check that make-dag runs: no frames are
    read, the whole span is one analysable stretch (or ``error`` is raised), no repository is
    looked at. Returns the configs the preflight was called with."""
    from offline_iaas.data import preflight
    from offline_iaas.data.segments import AnalysableSpan
    from offline_iaas.stretches import whole_span
    from offline_iaas.workflow import make_dag

    calls: list = []

    def fake_preflight(config, frame_files=None, **_options):
        calls.append(config)
        if error is not None:
            raise error
        stretch = whole_span(config)[0]
        return AnalysableSpan(
            stretches=[(stretch.gps_start, stretch.gps_end)],
            dropped=[],
            total_seconds=config.data.duration,
        )

    monkeypatch.setattr(preflight, "preflight", fake_preflight)
    # nor the repository check (these campaigns export none)
    monkeypatch.setattr(make_dag, "check_repository", lambda config, load_graphs=True: {})
    return calls


def run_dag(config, run_dir: Path) -> Path:
    """``make-dag`` then ``run-local`` (in process); no process of the run may be left."""
    from offline_iaas.workflow.local import run_local
    from offline_iaas.workflow.make_dag import make_dag

    make_dag(config, RunDir(run_dir))
    try:
        run_local(RunDir(run_dir))
    finally:
        assert processes_mentioning(str(run_dir)) == []
    return run_dir


def parse_pbtxt(text: str):
    """A ``config.pbtxt`` parsed as Triton's ``ModelConfig`` (protobuf's text format)."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    return text_format.Parse(text, model_config_pb2.ModelConfig())


def campaign_records(run_dir: Path, clients: tuple[str, ...]) -> RunDir:
    """A campaign config and a job spec per client in a hand-written DAG's run directory (no
    make-dag), so that parts and the merge's output can be complete (``completeness.py``)."""
    from offline_iaas.config import config_from_dict, write_config
    from offline_iaas.records import ClientSegment, write_client_job

    raw = {"data": {"frames": "f", "channels": ["H1:X"], "start": 1_000_000_000,
                    "duration": 64, "sample_rate": 256},
           "model": {"repository": "repo", "kernel_seconds": 1.0, "inference_rate": 4}}
    paths = RunDir(run_dir)
    paths.create()
    write_config(config_from_dict(raw, paths.config), paths.config)
    for index, node in enumerate(clients):
        write_client_job(paths, ClientSegment(index, node, "server0", ()))
    return paths


def complete_part(run: RunDir, node: str, data: bytes = b"part bytes",
                  servers: tuple[str, ...] = (), bad_files: tuple = ()) -> None:
    """A part of ``node`` complete by ``completeness.part_problem``: ``data`` as its file and a
    sidecar for the run's config and job spec (a test's stand-in for a client that streamed)."""
    from offline_iaas import records
    from offline_iaas.completeness import file_sha256
    from offline_iaas.config import load_config
    from offline_iaas.records import PartRecord, read_client_job

    segment = read_client_job(run, node)
    h5_path, json_path = run.part(node)
    h5_path.parent.mkdir(parents=True, exist_ok=True)
    h5_path.write_bytes(data)
    records.write(PartRecord(
        complete=True, index=segment.index, node=node, server=segment.server,
        pieces=segment.pieces, stream_hash=load_config(run.config).stream_hash(),
        outputs=("statistic",), sha256=file_sha256(h5_path), bytes=len(data),
        wall_seconds=1.0, peak_rss_mb=1.0, reconnects=0, first_request_unix=None,
        last_response_unix=None, tensor_bytes_sent=0, servers=servers or (segment.server,),
        bad_files=bad_files,
    ), json_path)


def complete_merge(run: RunDir, data: bytes = b"campaign bytes", written_in: Path | None = None
                   ) -> None:
    """The merge's output complete by ``completeness.merge_problem`` (``data`` as its file;
    ``written_in``: the run directory its record names, if any)."""
    from offline_iaas import records
    from offline_iaas.completeness import file_sha256
    from offline_iaas.config import load_config
    from offline_iaas.records import CampaignSummary

    config = load_config(run.config)
    h5_path, json_path = run.output
    h5_path.parent.mkdir(parents=True, exist_ok=True)
    h5_path.write_bytes(data)
    records.write(CampaignSummary(
        complete=True, wall_seconds=1.0, cpu_seconds=1.0, peak_rss_mb=1.0,
        sha256=file_sha256(h5_path), bytes=len(data), stream_hash=config.stream_hash(),
        merge_hash=config.merge_hash(), mode=config.model.mode,
        run_dir=str(written_in) if written_in is not None else ""), json_path)


def node_complete(run: RunDir, node: str) -> bool:
    """Whether a node of the run is complete (``completeness.node_problem``: the one
    definition run-local and status use)."""
    from offline_iaas.completeness import campaign_hashes, node_problem

    return node_problem(run, node, campaign_hashes(run)) is None
