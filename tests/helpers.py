"""Shared test helpers: a small campaign, the package's log lines, and a finder for processes
a test started."""

from __future__ import annotations

import hashlib
import logging
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from offline_iaas.config import CampaignConfig
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


TOLERANCE = 1e-5
"""How far (relative) a campaign's outputs may be from its reference or another run's of the
same data (``compare_outputs``): float rounding in the servers' batches, never a sample."""


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


def small_campaign(root: Path, overrides: list[str] | None = None, *, export: bool = True,
                   weights: Path | None = None):
    """SMALL_CAMPAIGN written to ``root/campaign.toml``, its frames synthesised and (``export``)
    its model repository exported (with ``untrained_weights`` written to ``weights`` if given);
    the campaign loaded with ``overrides`` (the synthesis is ``overrides``-free)."""
    from offline_iaas.config import load_config
    from offline_iaas.data.synth import write_synthetic_dataset
    from offline_iaas.repository.export import export_repository

    (root / "campaign.toml").write_text(SMALL_CAMPAIGN)
    write_synthetic_dataset(load_config(root / "campaign.toml"))
    if weights is not None:
        untrained_weights(weights)
    config = load_config(root / "campaign.toml", overrides or [])
    if export:
        export_repository(config, weights)
    return config


@dataclass(frozen=True)
class FinishedCampaign:
    """A small campaign run to the end by run-local (``finished_campaign``)."""

    root: Path
    config: CampaignConfig
    run_dir: Path
    reference: Path
    """The in-process reference's output."""


def run_local_stopping_all(run_dir: Path) -> tuple[list[str], list[str]]:
    """run-local on ``run_dir``, asserting afterwards that none of its processes is left; the
    nodes it started (servers and FINAL included) and its log lines."""
    from offline_iaas.workflow.local import run_local

    try:
        with captured_log() as lines:
            run_local(RunDir(run_dir))
    finally:
        assert processes_mentioning(str(run_dir)) == []
    return sorted(line.split(":")[0] for line in lines if ": started" in line), lines


def finished_campaign(root: Path, overrides: list[str]) -> FinishedCampaign:
    """``small_campaign`` with untrained weights, planned into ``root/run``, run to the end,
    and its in-process reference."""
    from offline_iaas.merge.reference import run_reference
    from offline_iaas.workflow.make_dag import make_dag

    config = small_campaign(root, overrides, weights=root / "weights")
    make_dag(config, RunDir(root / "run"))
    run_local_stopping_all(root / "run")
    reference, _ = run_reference(config, root / "reference.h5")
    return FinishedCampaign(root, config, root / "run", reference)


def sighup_as(action: signal.Handlers) -> Callable[[], None]:
    """A ``preexec_fn`` that starts a child with SIGHUP's disposition ``action`` (a child
    inherits an ignored SIGHUP: a suite run under ``nohup`` would pass it on)."""
    return lambda: signal.signal(signal.SIGHUP, action)


def wait_for(condition: Callable[[], bool], seconds: float,
             what: str | Callable[[], str], poll_seconds: float = 0.05) -> float:
    """Seconds until ``condition()`` holds, asked every ``poll_seconds``; fails after
    ``seconds`` naming ``what`` (called at the deadline when it is a function, so that it
    shows the state then)."""
    began = time.monotonic()
    while not condition():
        if time.monotonic() - began >= seconds:
            raise AssertionError(f"timed out waiting for {what() if callable(what) else what}")
        time.sleep(poll_seconds)
    return time.monotonic() - began


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
    """Replace the frame preflight and the repository check of the checks make-dag runs
    (``serve/startup_checks.py``): no frames are looked for or read, the whole span is one
    analysable stretch (or ``error`` is raised), no repository is looked at. Returns the
    configs the preflight was called with."""
    from offline_iaas.data.segments import AnalysableSpan
    from offline_iaas.serve import startup_checks
    from offline_iaas.stretches import whole_span

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

    monkeypatch.setattr(startup_checks, "discover_frames", lambda config: [])
    monkeypatch.setattr(startup_checks, "preflight", fake_preflight)
    # nor the repository check (these campaigns export none)
    monkeypatch.setattr(startup_checks, "check_repository", lambda config, load_graphs=True: {})
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


SPLITS = [(1, 4096), (2, 0)]
"""``(clients per server, merge.shard_seconds)`` a campaign is run with to check its output
against its reference: 1x1 with shard merges and their index, 1x2 with one merge node."""


def run_split(toml: Path, overrides: list[str], clients: int, shard_seconds: int
              ) -> tuple[CampaignConfig, Path]:
    """The campaign of ``toml`` (with ``overrides``) split as one of ``SPLITS`` and run to the
    end (``run_dag``) in ``run<clients>`` beside it: its config and run directory."""
    from offline_iaas.config import load_config

    config = load_config(toml, [*overrides, f"layout.clients_per_server={clients}",
                                f"merge.shard_seconds={shard_seconds}"])
    return config, run_dag(config, toml.parent / f"run{clients}")


def parse_pbtxt(text: str):
    """A ``config.pbtxt`` parsed as Triton's ``ModelConfig`` (protobuf's text format)."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    return text_format.Parse(text, model_config_pb2.ModelConfig())


def campaign_records(run_dir: Path, clients: tuple[str, ...]) -> RunDir:
    """A campaign config, its run record and a job spec per client in a hand-written DAG's run
    directory (no make-dag), so that parts and the merge's output can be complete
    (``completeness.py``) and the run is bound to its plan (``binding.py``)."""
    from offline_iaas.config import config_from_dict, write_config
    from offline_iaas.job_specs import write_client_job
    from offline_iaas.records import ClientShare

    raw = {"data": {"frames": "f", "channels": ["H1:X"], "start": 1_000_000_000,
                    "duration": 64, "sample_rate": 256},
           "model": {"repository": "repo", "kernel_seconds": 1.0, "inference_rate": 4}}
    paths = RunDir(run_dir)
    paths.create()
    write_config(config_from_dict(raw, paths.config), paths.config)
    for index, node in enumerate(clients):
        write_client_job(paths, ClientShare(index=index, node=node, server="server0", pieces=()))
    write_run_record(paths, clients)
    return paths


def write_run_record(run: RunDir, clients: tuple[str, ...]) -> None:
    """``run.json`` for the run directory's campaign.toml, as make-dag writes it (its hashes;
    one server), in a run directory written by hand."""
    from offline_iaas import records
    from offline_iaas.config import load_config
    from offline_iaas.records import RunInfo

    config = load_config(run.config)
    records.write(RunInfo(run_id="0" * 16, stream_hash=config.stream_hash(),
                          merge_hash=config.merge_hash(), sequence_base=0, servers=("server0",),
                          clients=clients, created="2026-01-01T00:00:00+00:00"), run.run_info)


def complete_part(run: RunDir, node: str, data: bytes = b"part bytes",
                  servers: tuple[str, ...] = (), bad_files: tuple = ()) -> None:
    """A part of ``node`` complete by ``completeness.part_problem``: ``data`` as its file and a
    sidecar for the run's config and job spec (a test's stand-in for a client that streamed)."""
    from offline_iaas import records
    from offline_iaas.config import load_config
    from offline_iaas.digests import file_sha256
    from offline_iaas.job_specs import read_client_job
    from offline_iaas.records import PartRecord

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
    from offline_iaas.config import load_config
    from offline_iaas.digests import file_sha256
    from offline_iaas.summaries import CampaignSummary

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


def save_traced(network, path: Path, input_shape: tuple[int, ...], wrapped: bool = False
                ) -> Path:
    """``network`` traced on zeros of ``input_shape`` and saved as TorchScript to ``path``;
    ``wrapped``: held by an outer module first, so that its parameters are named
    ``inner.<name>`` (a user's training wrapper), computing the same."""
    import torch

    class Wrapper(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.inner(x)

    module = (Wrapper(network) if wrapped else network).eval()
    torch.jit.save(torch.jit.trace(module, torch.zeros(input_shape)), str(path))
    return path


def relative_difference(values: np.ndarray, reference: np.ndarray) -> float:
    """Largest ``|values - reference|`` over the largest ``|reference|``: NaN when either
    holds NaN, so a comparison against a tolerance fails both ways."""
    values, reference = np.asarray(values, np.float64), np.asarray(reference, np.float64)
    assert values.shape == reference.shape and values.size, (values.shape, reference.shape)
    return float(np.max(np.abs(values - reference)) / np.max(np.abs(reference)))


def a_sample_late(samples: np.ndarray) -> np.ndarray:
    """``samples`` [channels, n] one sample later: a zero first, the last dropped (the input
    of a comparison's negative control)."""
    zero = np.zeros((samples.shape[0], 1), samples.dtype)
    return np.concatenate([zero, samples[:, :-1]], axis=1)


def assert_same_samples(values: np.ndarray, expected: np.ndarray) -> None:
    """``values`` equal ``expected`` bit for bit, ``expected`` is finite (``assert_array_equal``
    alone takes NaN for NaN), and the same comparison one sample late along the last axis
    fails (the negative control: the check can fail, which a constant would not)."""
    values, expected = np.asarray(values), np.asarray(expected)
    assert expected.size and np.isfinite(expected).all(), "the expected values are not finite"
    np.testing.assert_array_equal(values, expected)
    assert not np.array_equal(values[..., 1:], expected[..., :-1])


def file_hashes(root: Path) -> dict[str, str]:
    """Every file under ``root`` (relative path) and the SHA-256 of its content: what a
    refused command must leave as it was."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}
