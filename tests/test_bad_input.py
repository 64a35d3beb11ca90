"""The bad-input catalogue (docs/errors.md): every case through the real command line.

Each case prepares a workspace (a copy of a small campaign: config, GWF frames, model
repository, and a run directory where the case needs one), breaks one thing, runs
``python -m offline_iaas.cli ...`` and checks: the documented exit code, one line on stderr
(``check`` lists several problems one per line under a summary line) naming the offending
file, key, channel or node, no traceback, and no file that existed before changed or deleted
(nor a temporary file left behind). Cases that need a simulated failure (a full disk, no free
port) run in-process in test_bad_input_simulated.py; the run directories' cases (exit 6) are in
test_bad_input_run_directories.py.

Each case's whole message is checked against its row of docs/errors.md (the row's id is the
case's id; ``tests/error_catalogue.documented``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from tests import bad_input_cases
from tests.bad_input_cases import (
    Case,
    check_case,
    closed_port,
    run_dir,
    set_sample,
    write,
    write_bytes,
)
from tests.error_catalogue import documented
from tests.helpers import SMALL_CAMPAIGN

base = bad_input_cases.base
"""The small campaign each case copies (its fixture)."""

H_FILE = "H-H1_SYNTH-1262304032-16.gwf"
L_FILE = "L-L1_SYNTH-1262304032-16.gwf"
STRAIN = "H1:GDS-CALIB_STRAIN"
NO_REPO = 'model.repository="none"'
"""check skips a repository that is not there: no export fits a case's channels or rate."""


def _config_case(id: str, overrides: list[str], *fragments: str, in_file: bool = True) -> Case:
    """make-dag with ``--set`` overrides; the message names the config file if ``in_file``."""

    def setup(ws: Path) -> list[str]:
        sets = [arg for o in overrides for arg in ("--set", o)]
        return ["make-dag", str(ws / "campaign.toml"), *sets, "--out", str(ws / "run")]

    return Case(id, 2, setup,
                lambda ws: [str(ws / "campaign.toml"), *fragments] if in_file else [*fragments])


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
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, base: Path, tmp_path: Path) -> None:
    check_case(case, base, tmp_path, lambda message, placeholders, code: documented(
        case.id, message, placeholders, exit_code=code))
