"""An aframe ``InterferometerResponseSet`` as the set injected on the fly (issue #41,
``offline_iaas.search.response_set``): its projected waveforms are added as they are.

The equality: one set of two binaries (times on the frame grid) written twice, in this
project's layout (lalsimulation makes the waveforms on the fly) and as an
``InterferometerResponseSet`` at the frame rate (the waveforms lalsimulation projected, read
back as they are); the reference's foreground statistic is the same for both (``TOLERANCE``),
and the response set one frame sample late is not (the negative control). The placement is
checked against where aframe's own ``inject`` puts each row (its convention, written here
sample by sample: ``aframe_inject``).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import h5py
import numpy as np
import pytest

from offline_iaas.config import load_config
from offline_iaas.data.synth import write_synthetic_dataset
from offline_iaas.errors import DataError, exit_code
from offline_iaas.merge import reference as reference_module
from offline_iaas.merge.output import compare_outputs
from offline_iaas.merge.reference import run_reference
from offline_iaas.repository.export import export_repository
from offline_iaas.rundir import RunDir
from offline_iaas.search import onthefly
from offline_iaas.search.injection_file import read_injection_set, write_injection_set
from offline_iaas.search.injection_list import read_campaign_injections
from offline_iaas.search.injection_set import InjectionSet
from offline_iaas.search.injections_aframe import redshift_of_distance
from offline_iaas.search.population import PopulationSpec, draw_binaries
from offline_iaas.search.response_set import ResponseSet, read_response_set, write_response_set
from offline_iaas.workflow.make_dag import make_dag
from tests.error_catalogue import documented
from tests.helpers import (
    SMALL_CAMPAIGN,
    captured_log,
    relative_difference,
    run_dag,
    untrained_weights,
)

TOLERANCE = 1e-7
"""Largest |response set's foreground - lalsimulation's| / max |statistic|, as
``test_injections_on_the_fly.TOLERANCE`` (about two float32 ulps). Measured: 0, bit for bit
(the file holds the float64 samples ``waveforms.detector_strain`` adds, on the same grid);
one frame sample late: 2.2e-5, 200x the tolerance."""
FRAME_RATE = 1024
START = 1262304000
SPEC = PopulationSpec("IMRPhenomD", 20.0, 25.0, 40.0, 0.5, 0.4)
IFOS = ("H1", "L1")


def two_binaries() -> InjectionSet:
    """Two loud binaries at times on the 1/64 s grid (so on the frame grid, and exact in
    LIGOTimeGPS's nanoseconds), with recorded SNRs and a population of 5 draws."""
    binaries = draw_binaries(SPEC, 2, np.random.default_rng(41))
    times = (START + 11.5 + 3 / 64, START + 21.25 + 5 / 64)
    distance = 250.0
    binaries = [dataclasses.replace(b, gps_time=t, luminosity_distance=distance,
                                    redshift=float(redshift_of_distance(np.array(distance))))
                for b, t in zip(binaries, times, strict=True)]
    return InjectionSet(tuple(binaries), SPEC.approximant, SPEC.f_lower_hz,
                        snr={"H1": (20.0, 15.0), "L1": (18.0, 14.0)},
                        attrs={**SPEC.attrs(), "drawn": 5, "injected": 2})


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Clean frames (no injection) at 1024 Hz, one repository; the set as this project's file
    and as a response set at the frame rate."""
    root = tmp_path_factory.mktemp("irs")
    text = (SMALL_CAMPAIGN.replace("duration = 64", "duration = 32")
            .replace("injections = 1", "injections = 0")
            .replace("frame_sample_rate = 256", f"frame_sample_rate = {FRAME_RATE}"))
    (root / "clean.toml").write_text(text)
    write_synthetic_dataset(load_config(root / "clean.toml", [f'data.frames="{root / "f"}"']))
    injections = two_binaries()
    write_injection_set(root / "set.h5", injections)
    write_response_set(root / "irs.hdf5", injections, FRAME_RATE, IFOS)

    def config(injection_file: Path):
        return load_config(root / "clean.toml", [
            'model.mode="bbhnet"', f'model.repository="{root / "repository"}"',
            f'data.frames="{root / "f"}"', f'search.injections="{injection_file}"',
            "search.inject=true", "search.slides=2"])

    export_repository(config(root / "set.h5"), untrained_weights(root / "weights"))
    return {"root": root, "injections": injections, "config": config}


def foreground(path: Path) -> np.ndarray:
    with h5py.File(path, "r") as f:
        return f["foreground"][()]


def relative(a: np.ndarray, b: np.ndarray) -> float:
    assert len(a) == len(b) > 0 and np.array_equal(a["time"], b["time"])
    return relative_difference(a["statistic"], b["statistic"])


def test_a_response_set_s_foreground_equals_lalsimulation_s_and_one_sample_late_fails(
        campaign, monkeypatch) -> None:
    root, config = campaign["root"], campaign["config"]
    irs = config(root / "irs.hdf5")
    assert isinstance(onthefly.on_the_fly(irs).source, ResponseSet)  # the file's waveforms
    lalsim, _ = run_reference(config(root / "set.h5"), root / "lalsim.h5")
    fly, _ = run_reference(irs, root / "irs.h5")
    expected = foreground(lalsim)
    assert relative(foreground(fly), expected) <= TOLERANCE
    # found/missed and VT of the response set: its rows and num_injections (5 draws)
    summary = json.loads(fly.with_suffix(".json").read_text())["bbhnet"]
    theirs = json.loads(lalsim.with_suffix(".json").read_text())["bbhnet"]
    assert summary["sensitivity"]["population"].pop("source").endswith("irs.hdf5")
    theirs["sensitivity"]["population"].pop("source")
    assert summary == theirs
    assert summary["injection_counts"]["listed"] == 2
    point = summary["sensitivity"]["curve"][0]  # trials: the file's num_injections
    assert (point["injections"], point["trials"]) == (2, 5.0) and point["vt_gpc3_years"] > 0
    population = read_campaign_injections(root / "irs.hdf5").population
    assert (population["injected"], population["drawn"]) == (2, 5)
    # the negative control: the response set one frame sample late
    late = onthefly.on_the_fly
    monkeypatch.setattr(reference_module, "on_the_fly",
                        lambda c, s=0.0: late(c, s + 1.0 / FRAME_RATE))
    shifted, _ = run_reference(irs, root / "late.h5")
    assert relative(foreground(shifted), expected) > 10 * TOLERANCE


@pytest.mark.slow
def test_a_campaign_of_two_clients_adds_the_response_set_as_the_reference_does(campaign
                                                                               ) -> None:
    """run-local, one server, two clients: each client reads the file's rows itself; the
    campaign's foreground and summary equal the reference's."""
    root, config = campaign["root"], campaign["config"]
    fly = root / "irs.h5"
    if not fly.exists():
        run_reference(config(root / "irs.hdf5"), fly)
    run_dir = run_dag(config(root / "irs.hdf5"), root / "run")
    comparison = compare_outputs(run_dir / "output" / "campaign.h5", fly)
    assert comparison.problems == [] and comparison.worst <= TOLERANCE
    assert np.array_equal(foreground(run_dir / "output" / "campaign.h5"), foreground(fly))


# ---- aframe's schema, written here with h5py, and aframe's inject -----------------------------


def aframe_inject(x: np.ndarray, start: float, times: np.ndarray, waveforms: np.ndarray,
                  sample_rate: float, duration: float, right_pad: float) -> np.ndarray:
    """Where aframe's ``InterferometerResponseSet.inject`` (``libs/ledger/ledger/
    injections.py`` at commit 6a45a6e9cef86c4542acb27e3e3b7db65051eb82) puts each row, written
    here sample by sample from its convention, not from its code: sample ``k`` of row ``i``
    lands on ``x``'s sample ``int((times[i] - start) * sample_rate) - int((duration -
    right_pad) * sample_rate) + k`` (truncation: a time between samples goes to the sample
    before it); samples outside ``x`` are dropped. ``waveforms``: rows x detectors x samples."""
    out = x.copy()
    lead = int((duration - right_pad) * sample_rate)
    for row, time in zip(waveforms, times, strict=True):
        first = int((time - start) * sample_rate) - lead
        for k in range(row.shape[-1]):
            if 0 <= first + k < out.shape[-1]:
                out[:, first + k] += row[:, k]
    return out


RATE, DURATION, RIGHT_PAD = 512.0, 2.0, 0.5


def response_file(path: Path, times: list[float], rows: dict[str, np.ndarray],
                  shift: list[list[float]] | None = None) -> None:
    """An ``InterferometerResponseSet`` as aframe's ``testing_waveforms`` writes it
    (``Ledger.write``: parameters, waveforms/<ifo>, metadata as root attributes)."""
    n = len(times)
    fields = {"mass_1": 40.0, "mass_2": 30.0, "a_1": 0.0, "a_2": 0.0, "tilt_1": 0.0,
              "tilt_2": 0.0, "phi_12": 0.0, "phi_jl": 0.0, "ra": 1.0, "dec": 0.2,
              "redshift": 0.1, "psi": 0.3, "theta_jn": 0.4, "phase": 0.5, "snr": 12.0}
    with h5py.File(path, "w") as f:
        group = f.create_group("parameters")
        for name, value in fields.items():
            group.create_dataset(name, data=np.full(n, value))
        group.create_dataset("ifo_snrs", data=np.full((n, 2), 8.0))
        group.create_dataset("injection_time", data=np.asarray(times, np.float64))
        group.create_dataset("shift", data=np.asarray(shift or [[0.0, 0.0]] * n))
        waveforms = f.create_group("waveforms")
        for ifo, values in rows.items():
            waveforms.create_dataset(ifo, data=values)
        f.attrs.update({"length": n, "ifos": ["H1", "L1"], "sample_rate": RATE,
                        "duration": DURATION, "right_pad": RIGHT_PAD, "num_injections": 9})


def placed(path: Path, config_start: float, rate: float, span_seconds: float,
           shift_seconds: float = 0.0) -> np.ndarray:
    """What ``OnTheFly`` adds to zeros of H1, L1 over ``span_seconds`` from ``config_start``."""
    responses = read_response_set(path)
    injections = read_injection_set(path, approximant="unrecorded", f_lower_hz=float("nan"))
    fly = onthefly.OnTheFly(injections, ("H1:S", "L1:S"), config_start, shift_seconds,
                            responses)
    zeros = np.zeros(int(span_seconds * rate))
    return np.stack([fly.add(f"{ifo}:S", config_start, rate, zeros) for ifo in IFOS])


def test_aframe_s_response_set_is_added_as_aframe_s_inject_adds_it(tmp_path: Path) -> None:
    """Arbitrary rows (not waveforms: read as they are), one time on the grid and one between
    samples (truncated to the sample before, as aframe does), added where aframe's inject adds
    them; moved by one sample they are not."""
    rng = np.random.default_rng(3)
    times = [START + 4.0 + 7 / RATE, START + 7.3 + 0.4 / RATE]
    rows = {ifo: rng.normal(size=(2, int(DURATION * RATE))) for ifo in ("h1", "l1")}
    response_file(tmp_path / "waveforms.hdf5", times, rows)
    got = placed(tmp_path / "waveforms.hdf5", START, RATE, 12.0)
    stacked = np.stack([rows["h1"], rows["l1"]], axis=1)
    expected = aframe_inject(np.zeros((2, int(12 * RATE))), float(START), np.asarray(times),
                             stacked, RATE, DURATION, RIGHT_PAD)
    assert np.abs(expected).max() > 1 and np.array_equal(got, expected)
    late = placed(tmp_path / "waveforms.hdf5", START, RATE, 12.0, 1 / RATE)
    assert not np.allclose(late, expected)
    listed = read_injection_set(tmp_path / "waveforms.hdf5", "unrecorded", float("nan"))
    assert (listed.attrs["injected"], listed.attrs["drawn"]) == (2, 9)


def test_a_response_set_at_another_rate_is_resampled(tmp_path: Path) -> None:
    """A 40 Hz sinusoid in Hann at 512 Hz, added to 2048 Hz frames: the sinusoid at the finer
    grid, placed where aframe places the rows (times on the file's grid)."""
    n = int(DURATION * RATE)
    k = np.arange(n)
    row = np.sin(2 * np.pi * 40.0 * k / RATE) * np.hanning(n)
    t0 = START + 3.0 + 5 / RATE
    response_file(tmp_path / "waveforms.hdf5", [t0], {"h1": row[None], "l1": -row[None]})
    frame_rate = 4 * RATE
    got = placed(tmp_path / "waveforms.hdf5", START, frame_rate, 8.0)
    j = np.arange(int(8 * frame_rate))
    u = (START + j / frame_rate - (t0 - (DURATION - RIGHT_PAD))) * RATE  # file samples
    inside = (u >= 0) & (u <= n - 1)
    expected = np.where(inside, np.sin(2 * np.pi * 40.0 * u / RATE)
                        * (0.5 - 0.5 * np.cos(2 * np.pi * np.clip(u, 0, n - 1) / (n - 1))), 0)
    assert np.abs(got[0] - expected).max() <= 1e-3 and np.array_equal(got[1], -got[0])
    # control: one file sample off is far from it
    assert np.abs(np.roll(got[0], 4) - expected).max() > 0.1


def test_a_response_set_without_a_strain_detector_is_refused(tmp_path: Path,
                                                             campaign) -> None:
    """One line naming the file and the detector; a non-zero shift is refused as aframe's
    parameter sets are (``injection-aframe-shift``)."""
    rows = {"h1": np.zeros((1, int(DURATION * RATE)))}
    response_file(tmp_path / "waveforms.hdf5", [START + 8.0], rows)
    config = campaign["config"](tmp_path / "waveforms.hdf5")
    with pytest.raises(DataError, match="no 'waveforms/l1' for strain channel") as caught:
        make_dag(config, RunDir(tmp_path / "run"))  # refused before any client runs
    assert not (tmp_path / "run").exists()
    documented("injection-response-set-detector", str(caught.value),
               {tmp_path / "waveforms.hdf5": "F"}, exit_code=exit_code(DataError))
    both = {**rows, "l1": rows["h1"]}
    response_file(tmp_path / "waveforms.hdf5", [START + 8.0], both, shift=[[0.0, 1.0]])
    with pytest.raises(DataError, match="non-zero 'parameters/shift'"):
        onthefly.on_the_fly(config)
    response_file(tmp_path / "waveforms.hdf5", [START + 8.0], both)  # control
    assert isinstance(onthefly.on_the_fly(config).source, ResponseSet)


def test_a_response_set_whose_rows_are_not_duration_long_is_refused(tmp_path: Path) -> None:
    rows = {ifo: np.zeros((1, int(DURATION * RATE) - 1)) for ifo in ("h1", "l1")}
    response_file(tmp_path / "waveforms.hdf5", [START + 8.0], rows)
    with pytest.raises(DataError, match=r"'waveforms/h1' has shape \(1, 1023\), expected "
                       r"\(1, 1024\)") as caught:
        read_response_set(tmp_path / "waveforms.hdf5")
    documented("injection-response-set-shape", str(caught.value),
               {tmp_path / "waveforms.hdf5": "F"}, exit_code=exit_code(DataError))


def test_writing_aframe_s_layout_says_where_aframe_reads_the_reference_frequency(
        tmp_path: Path) -> None:
    """aframe reads ``reference_frequency`` from its pipeline config (``[luigi_base]``), not
    from the file: the writer says what to set there, and writes it as the attribute this
    project's reader reads back (which aframe's file does not have: its 50 Hz then)."""
    injections = dataclasses.replace(two_binaries(), reference_frequency_hz=30.0)
    with captured_log() as lines:
        write_response_set(tmp_path / "irs.hdf5", injections, 256, IFOS)
    said = [line for line in lines if "aframe reads the reference frequency" in line]
    assert len(said) == 1 and "irs.hdf5: aframe reads" in said[0]
    assert "set reference_frequency = 30 in its [luigi_base]" in said[0]
    with h5py.File(tmp_path / "irs.hdf5") as f:
        assert f.attrs["reference_frequency_hz"] == 30.0
    assert read_injection_set(tmp_path / "irs.hdf5").reference_hz == 30.0
    response_file(tmp_path / "waveforms.hdf5", [START + 8.0],
                  {ifo: np.zeros((1, int(DURATION * RATE))) for ifo in ("h1", "l1")})
    aframe = tmp_path / "waveforms.hdf5"
    assert read_injection_set(aframe, "IMRPhenomPv2", 20.0).reference_hz == 50.0
    assert read_injection_set(aframe, "IMRPhenomPv2", 20.0, 40.0).reference_hz == 40.0


def test_a_read_past_an_injection_drops_its_projection_and_a_read_back_makes_it_again(
        tmp_path: Path) -> None:
    """A month's share must not hold every projection it made: reading in 4 s blocks, at most
    the blocks' own injections are held, and reading a span again after it adds the same."""
    rng = np.random.default_rng(5)
    times = [START + 4.0, START + 20.0]
    rows = {ifo: rng.normal(size=(2, int(DURATION * RATE))) for ifo in ("h1", "l1")}
    response_file(tmp_path / "waveforms.hdf5", times, rows)
    whole = placed(tmp_path / "waveforms.hdf5", START, RATE, 32.0)
    fly = onthefly.OnTheFly(
        read_injection_set(tmp_path / "waveforms.hdf5", approximant="unrecorded",
                           f_lower_hz=float("nan")), ("H1:S", "L1:S"), START, 0.0,
        read_response_set(tmp_path / "waveforms.hdf5"))
    block = int(4 * RATE)
    held = []
    for first in range(0, len(whole[0]), block):
        gps = START + first / RATE
        got = fly.add("H1:S", gps, RATE, np.zeros(block))
        assert np.array_equal(got, whole[0, first:first + block])
        held.append({k[0] for k in fly._strain})
    assert {0, 1} - set().union(*held) == set()  # both were made ...
    assert held[-1] == set()  # ... and neither is held after the read has passed them
    again = fly.add("H1:S", START, RATE, np.zeros(block))  # a read going back
    assert np.array_equal(again, whole[0, :block]) and np.any(again != 0)
