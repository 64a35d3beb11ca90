"""``offline-iaas draw-injections`` and the one draw it shares with synth
(offline_iaas.search.draw_injections)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import h5py
import lal
import lalmetaio
import lalsimulation
import numpy as np
import pytest
from gwpy.timeseries import TimeSeries
from scipy import signal, stats

from offline_iaas.cli import main
from offline_iaas.config import config_from_dict
from offline_iaas.data.synth import design_asd, write_synthetic_dataset
from offline_iaas.search.draw_injections import (
    MARGIN_SECONDS,
    MEASURED_PSD_SECONDS,
    draw_above_cut,
)
from offline_iaas.search.injection_file import read_injection_set
from offline_iaas.search.population import PopulationSpec, draw_binaries
from offline_iaas.search.waveforms import (
    detector_strain,
    network_snr,
    optimal_snr,
    polarizations,
)
from tests.error_catalogue import documented

START = 1262304000
STRAIN = ["H1:GDS-CALIB_STRAIN", "L1:GDS-CALIB_STRAIN"]
DURATION, INTERVAL, SNR_MIN, FS = 192, 16.0, 7.0, 256.0
SPEC = PopulationSpec(approximant="IMRPhenomD", f_lower_hz=20.0, mass_min_msun=25.0,
                      mass_max_msun=40.0, spin_max=0.5, redshift_max=0.4)
POPULATION = {"approximant": "IMRPhenomD", "f_lower_hz": 20.0, "mass_min_msun": 25.0,
              "mass_max_msun": 40.0, "spin_max": 0.5, "redshift_max": 0.4}


@pytest.fixture(scope="module")
def clean_frames(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """192 s of H1/L1 synthetic noise at 256 Hz without injections, and a campaign config
    naming its frames (its [synth] is the population to draw)."""
    tmp = tmp_path_factory.mktemp("draw")
    synth = {"file_duration": 64, "frame_sample_rate": 256, "witnesses": 0, "injections": 0,
             "seed": 5, "network_snr_min": SNR_MIN, **POPULATION}
    data = {"frames": "frames", "channels": STRAIN, "start": START, "duration": DURATION,
            "sample_rate": FS}
    write_synthetic_dataset(config_from_dict(
        {"data": data, "model": {"repository": "repo"}, "synth": synth}, tmp / "c.toml"))
    toml = ["[data]", 'frames = "frames"', f"channels = {STRAIN!r}".replace("'", '"'),
            f"start = {START}", f"duration = {DURATION}", f"sample_rate = {FS}",
            "[model]", 'repository = "repo"', "[synth]"]
    toml += [f"{k} = {v!r}".replace("'", '"') for k, v in synth.items()]
    (tmp / "campaign.toml").write_text("\n".join(toml) + "\n")
    return tmp


def gwpy_strain(directory: Path, ifo: str, lo: float, hi: float) -> np.ndarray:
    paths = sorted(str(p) for p in (directory / "frames").glob(f"{ifo[0]}-{ifo}_*.gwf"))
    return TimeSeries.read(paths, f"{ifo}:GDS-CALIB_STRAIN", start=lo, end=hi).value


# The oracle of the recorded SNRs, from the documented definitions (the module docstrings of
# search/draw_injections.py and search/waveforms.py) with lal, lalsimulation and scipy only.
PSD_SECONDS, SEGMENT = 64.0, 1024  # the measured PSD's span; its 4 s Welch segments
SNR_REL = 1e-5


def span_by_definition(t: float, start: float, end: float) -> tuple[float, float]:
    """64 s centred on ``t``, moved inside ``[start, end)`` at its ends, on the sample grid
    from ``start`` (its first sample at or before)."""
    lo = min(max(t - PSD_SECONDS / 2, start), end - PSD_SECONDS)
    lo = start + np.floor((lo - start) * FS) / FS
    return lo, lo + PSD_SECONDS


def median_welch(x: np.ndarray) -> np.ndarray:
    """scipy's median Welch (Hann, half-overlapping 4 s segments, mean removed), divided by
    scipy's median bias; 31 segments in 64 s."""
    assert len(x) == PSD_SECONDS * FS and (len(x) - SEGMENT) // (SEGMENT // 2) + 1 == 31
    return signal.welch(x, fs=FS, window="hann", nperseg=SEGMENT, noverlap=SEGMENT // 2,
                        average="median")[1]


def inverse_bias_by_order_statistic(k: int) -> float:
    """``E[S / S^]`` for ``S^`` the median of ``k`` (odd) independent exponential
    periodograms of mean ``S`` divided by the median bias ``sum_{l<=k} (-1)^(l+1) / l``:
    the median is the ``j = (k+1)/2``-th order statistic, ``F(X_(j)) ~ Beta(j, k-j+1)``
    with ``F(x) = 1 - exp(-x)``, so ``E[1/X_(j)] = E[-1/log(1 - U)]``, U that Beta."""
    assert k % 2 == 1
    j = (k + 1) // 2
    bias = sum((-1) ** (ell + 1) / ell for ell in range(1, k + 1))
    return bias * stats.beta(j, k - j + 1).expect(lambda u: -1.0 / np.log1p(-u))


INVERSE_BIAS_31 = inverse_bias_by_order_statistic(31)


def slots_by_hand() -> list[float]:
    """The slots by the module docstring's definition, with lalsimulation's SimInspiralTD
    only: ``t_j = start + lead + interval (j + 1/2)``, ``lead`` the longest waveform before
    coalescence (the lightest binary at z = 0, spins +spin_max) plus the margin, ``trail`` the
    longest after it (the heaviest at redshift_max, detector frame) plus the margin."""
    def before_after(mass_detector: float) -> tuple[float, float]:
        hp, _ = lalsimulation.SimInspiralTD(
            mass_detector * lal.MSUN_SI, mass_detector * lal.MSUN_SI, 0.0, 0.0, 0.5,
            0.0, 0.0, 0.5, 1e9 * lal.PC_SI, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0 / FS, 20.0, 20.0,
            None, lalsimulation.GetApproximantFromString("IMRPhenomD"))
        before = -float(hp.epoch)
        return before, len(hp.data.data) / FS - before
    light, heavy = before_after(25.0), before_after(40.0 * 1.4)
    lead = max(light[0], heavy[0]) + MARGIN_SECONDS
    trail = max(light[1], heavy[1]) + MARGIN_SECONDS
    return [START + lead + INTERVAL * (j + 0.5)
            for j in range(int((DURATION - lead - trail) // INTERVAL))]


def strain_by_hand(row: dict[str, float], ifo: str) -> np.ndarray:
    """The binary of one recorded row (detector-frame masses, Mpc, radians, coalescence at
    ``injection_time``) from lalsimulation's SimInspiralTD at 256 Hz from 20 Hz (reference
    20 Hz), projected by lalsimulation's SimDetectorStrainREAL8TimeSeries (lal's antenna
    patterns and light-travel delay as the Earth turns). Its delay interpolation is part of
    what is injected: it damps the band near Nyquist (x0.89 at 125 Hz), and the SNR of
    ``F+ h+ + Fx hx`` without it is 0.2-0.7 % higher here."""
    hp, hc = lalsimulation.SimInspiralTD(
        row["mass_1_detector"] * lal.MSUN_SI, row["mass_2_detector"] * lal.MSUN_SI,
        row["spin_1x"], row["spin_1y"], row["spin_1z"],
        row["spin_2x"], row["spin_2y"], row["spin_2z"],
        row["luminosity_distance"] * 1e6 * lal.PC_SI, row["inclination"], row["phase"],
        0.0, 0.0, 0.0, 1.0 / FS, 20.0, 20.0, None,
        lalsimulation.GetApproximantFromString("IMRPhenomD"))
    hp.epoch += row["injection_time"]
    hc.epoch += row["injection_time"]
    h = lalsimulation.SimDetectorStrainREAL8TimeSeries(
        hp, hc, row["ra"], row["dec"], row["psi"], lal.cached_detector_by_prefix[ifo])
    return np.array(h.data.data)


def snr_by_hand(strain: np.ndarray, psd: np.ndarray) -> float:
    """``sqrt(4 df sum_{20 Hz <= f < fs/2} |H(f)|^2 / S(f))``, ``H`` the DFT times ``1/fs``
    zero-padded to a power of two of at least 4 s, each frequency taking the PSD of its
    nearest 0.25 Hz bin."""
    n = max(int(4 * FS), 1 << int(np.ceil(np.log2(len(strain)))))
    spectrum = np.fft.rfft(strain, n) / FS
    freqs = np.fft.rfftfreq(n, 1 / FS)
    band = (freqs >= 20.0) & (freqs < FS / 2)
    noise = psd[np.rint(freqs[band] / 0.25).astype(int)]
    return float(np.sqrt(4 * np.sum(np.abs(spectrum[band]) ** 2 / noise) * FS / n))


def test_draw_injections_writes_every_layout_cut_at_each_time(clean_frames: Path,
                                                              capsys) -> None:
    """One injection per 16 s of clean frames, each at or above the cut; the rejected draws
    are counted (drawn = kept + rejected); the three files read back with the other side's
    readers. Each recorded SNR is recomputed without the project's code from the file's
    parameters (lalsimulation's waveform and projection, ``strain_by_hand``) against the PSD
    of the 64 s around the injection (``span_by_definition``; the frames read with gwpy,
    scipy's median Welch, times ``E[S/S^]`` from the median's order statistic) to 1e-5
    (observed <= 2.4e-6: the placement on the sample grid); the PSD of the neighbouring
    64 s (0.1-1.4 % off) or one without ``E[S/S^]`` (3.4 % off) fails the same comparison."""
    config = clean_frames / "campaign.toml"
    outs = {"ours": clean_frames / "set.h5", "aframe": clean_frames / "aframe.hdf5",
            "ligolw": clean_frames / "set.xml.gz"}
    for name, out in outs.items():
        layout = ["--layout", "aframe"] if name == "aframe" else []
        assert main(["draw-injections", str(config), "--out", str(out),
                     "--interval-seconds", str(INTERVAL), *layout]) == 0
    injections = read_injection_set(outs["ours"])
    times, slots = [b.gps_time for b in injections.binaries], np.array(slots_by_hand())
    np.testing.assert_allclose(times, slots, rtol=0, atol=1 / FS)  # the sample grid
    # the control: without the margin at the start, the slots are a second early
    assert not np.allclose(times, slots - MARGIN_SECONDS, rtol=0, atol=1 / FS)
    assert np.array_equal(np.round((np.array(times) - START) * FS) / FS, np.subtract(times, START))
    assert len(times) == 11 and np.all(np.diff(times) == INTERVAL)
    attrs = injections.attrs
    assert attrs["injected"] == 11 and attrs["drawn"] > attrs["injected"]  # some rejected
    assert f"{attrs['drawn'] - 11} below network SNR 7" in capsys.readouterr().out
    assert np.all(injections.network_snr >= SNR_MIN)
    with h5py.File(outs["ours"]) as f:
        recorded = {k: f["parameters"][k][:] for k in f["parameters"]}
        reference_hz = float(f.attrs["reference_frequency_hz"])
    assert reference_hz == 20.0 and MEASURED_PSD_SECONDS == PSD_SECONDS
    end = START + DURATION
    for i in (0, 5, 10):
        row = {k: float(v[i]) for k, v in recorded.items()}
        t = row["injection_time"]
        lo, hi = span_by_definition(t, START, end)
        # control span: the 64 s next to it, clear of it, inside the data
        other = lo + PSD_SECONDS if lo + 2 * PSD_SECONDS <= end else lo - PSD_SECONDS
        for ifo in ("H1", "L1"):
            strain = strain_by_hand(row, ifo)
            psd = median_welch(gwpy_strain(clean_frames, ifo, lo, hi))
            expected = snr_by_hand(strain, psd * INVERSE_BIAS_31)
            snr = row[f"{ifo.lower()}_snr_measured"]
            assert injections.snr[ifo][i] == snr  # what the reader gives is the column
            assert snr == pytest.approx(expected, rel=SNR_REL)  # NaN fails too
            # controls: the PSD of the neighbouring 64 s, or without E[S/S^], fails
            neighbour = median_welch(gwpy_strain(clean_frames, ifo, other, other + PSD_SECONDS))
            assert snr != pytest.approx(snr_by_hand(strain, neighbour * INVERSE_BIAS_31),
                                        rel=SNR_REL)
            assert snr != pytest.approx(snr_by_hand(strain, psd), rel=SNR_REL)
    # the same draws in the other layouts, read by aframe's schema and LAL's C reader
    with h5py.File(outs["aframe"]) as f:
        assert int(f.attrs["length"]) == 11 and int(f.attrs["num_injections"]) == attrs["drawn"]
        np.testing.assert_array_equal(f["parameters"]["injection_time"][:], times)
        assert f["parameters"]["ifo_snrs"].shape == (11, 2)
        check_response_set(f, injections)
    assert read_injection_set(outs["aframe"], "IMRPhenomD", 20.0).attrs["drawn"] == attrs["drawn"]
    rows, row = [], lalmetaio.SimInspiralTableFromLIGOLw(str(outs["ligolw"]))
    while row is not None:
        rows.append(row.geocent_end_time.gpsSeconds + 1e-9 * row.geocent_end_time.gpsNanoSeconds)
        row = row.next
    np.testing.assert_allclose(rows, times, rtol=0, atol=1e-8)


def check_response_set(f: h5py.File, injections) -> None:
    """aframe's InterferometerResponseSet (ledger/injections.py at the commit the reader
    names): root sample_rate, duration, right_pad; waveforms/<ifo lower case>, rows x
    duration * sample_rate; aframe's inject puts sample k of row i at injection_time -
    (duration - right_pad) + k / sample_rate. Placed that way on the data's grid, every row
    is the strain synth would add there (``detector_strain`` on the grid from START), and
    one sample off it is not (negative control)."""
    fs, duration, right_pad = (float(f.attrs[k]) for k in ("sample_rate", "duration",
                                                           "right_pad"))
    assert fs == FS and 0 < right_pad < duration
    n_samples = int(DURATION * FS)
    for ifo in ("H1", "L1"):
        rows = f["waveforms"][ifo.lower()][:]
        assert rows.shape == (11, int(duration * fs)) and rows.dtype == np.float64
        for i, binary in enumerate(injections.binaries):
            placed = np.zeros(n_samples + rows.shape[1])
            at = int(round((binary.gps_time - (duration - right_pad) - START) * fs))
            placed[at : at + rows.shape[1]] = rows[i]
            expected = np.zeros_like(placed)
            first, samples = detector_strain(
                binary, polarizations(binary, "IMRPhenomD", FS, 20.0), ifo, START)
            expected[first : first + len(samples)] = samples
            scale = np.abs(expected).max()
            assert scale > 0 and np.abs(placed - expected).max() <= 1e-6 * scale
            assert np.abs(np.roll(placed, 1) - expected).max() > 0.01 * scale


def test_the_cut_is_judged_at_each_injections_own_time() -> None:
    """Slots over 12 h against the design PSD: the kept binary of each slot is the first draw
    that reaches the cut at the slot's time (the draws replayed here from the same seed),
    and some draw's verdict at its own time differs from the one at mid-span (the antenna
    patterns turn): the check could tell the two apart."""
    times = [START + 3600.0 * k for k in range(12)]
    middle = START + 3600.0 * 5.5
    asd_at = lambda ifo, t: design_asd  # noqa: E731
    drawn = draw_above_cut(SPEC, times, ["H1", "L1"], FS, asd_at, SNR_MIN,
                           np.random.default_rng(11))
    replay = np.random.default_rng(11)
    kept, differ = [], 0

    def snr_at(binary, wave, t: float) -> float:
        moved = dataclasses.replace(binary, gps_time=t)
        return network_snr([optimal_snr(detector_strain(moved, wave, ifo, t)[1], FS,
                                        design_asd, 20.0) for ifo in ("H1", "L1")])

    for t in times:
        while True:
            binary = draw_binaries(SPEC, 1, replay, gps_time=t)[0]
            wave = polarizations(binary, "IMRPhenomD", FS, 20.0)
            own = snr_at(binary, wave, t) >= SNR_MIN
            differ += own != (snr_at(binary, wave, middle) >= SNR_MIN)
            if own:
                kept.append(binary)
                break
    assert drawn.binaries == kept and drawn.drawn > len(kept)
    assert differ >= 1


@pytest.mark.parametrize("case, every", [
    ("draw-injections-overlap", ["--rate-per-30s", "30"]),
    ("draw-injections-no-room", ["--interval-seconds", "400"]),
])
def test_an_interval_that_does_not_fit_is_refused(clean_frames: Path, capsys, case: str,
                                                   every: list[str]) -> None:
    """An interval shorter than the population's waveforms, or longer than the span: one
    line naming the config, exit 2, nothing written."""
    out = clean_frames / "refused.h5"
    config = clean_frames / "campaign.toml"
    assert main(["draw-injections", str(config), "--out", str(out), *every]) == 2
    assert not out.exists()
    message = capsys.readouterr().err.strip().splitlines()[-1].split("error: ", 1)[1]
    documented(case, message, {str(config): "C"})


def test_an_approximant_that_cannot_generate_the_population_is_refused_naming_the_key(
        clean_frames: Path, capsys) -> None:
    """SEOBNRv4 at this population's spins and frequencies: lalsimulation's "Input domain
    error" was exit 3 with a whole binary's repr, naming neither the file nor the key. Now one
    line naming synth.approximant and the binaries it was asked for, exit 2, nothing
    written."""
    out = clean_frames / "refused.h5"
    config = clean_frames / "campaign.toml"
    assert main(["draw-injections", str(config), "--out", str(out), "--interval-seconds",
                 "200", "--set", 'synth.approximant="SEOBNRv4"']) == 2
    assert not out.exists()
    message = capsys.readouterr().err.strip().splitlines()[-1].split("error: ", 1)[1]
    assert message.startswith(f"{config}: 'synth.approximant' SEOBNRv4 cannot generate the "
                              "population's extreme binaries ("), message
    documented("draw-injections-approximant-cannot", message, {str(config): "C"}, exit_code=2)


@pytest.mark.parametrize("value", ["nan", "-1"])
def test_a_network_snr_cut_that_is_no_number_or_negative_is_refused(
        clean_frames: Path, capsys, value: str) -> None:
    out = clean_frames / "refused.h5"
    config = clean_frames / "campaign.toml"
    assert main(["draw-injections", str(config), "--out", str(out),
                 "--network-snr-min", value]) == 2
    assert not out.exists()
    assert f"--network-snr-min must be >= 0, not {value}" in capsys.readouterr().err


@pytest.mark.parametrize("seed", [str(10**20), "-1"])
def test_a_seed_outside_64_bits_is_refused_naming_the_option(
        clean_frames: Path, capsys: pytest.CaptureFixture[str], seed: str) -> None:
    """--seed 10**20 drew, then HDF5 could not hold it in the file's attributes: exit 2, one
    line naming the option, nothing written (as synth.seed, ``config_numbers``)."""
    out = clean_frames / "refused.h5"
    config = clean_frames / "campaign.toml"
    assert main(["draw-injections", str(config), "--out", str(out), "--seed", seed]) == 2
    assert not out.exists()
    [line] = capsys.readouterr().err.strip().splitlines()
    assert f"--seed must be in [0, 2**63) (a 64-bit integer), not {seed}" in line
    if seed != "-1":
        documented("draw-injections-seed", line.split("error: ", 1)[1], exit_code=2)


def test_drawing_onto_an_existing_file_is_refused_unless_overwrite_is_given(
        clean_frames: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A campaign's output at ``--out`` (the reference was replaced by 18 KB of injections
    with exit 0): one line naming it and ``--overwrite``, exit 2, before the config is read,
    the file left as it was. The control: with ``--overwrite`` the set is drawn over it."""
    config, out = clean_frames / "campaign.toml", clean_frames / "reference.h5"
    with h5py.File(out, "w") as f:
        f["scores"] = np.arange(10_000, dtype=np.float64)
    before = out.read_bytes()
    draw = ["draw-injections", str(config), "--out", str(out), "--interval-seconds",
            str(INTERVAL)]
    assert main(draw) == 2
    message = capsys.readouterr().err.strip().splitlines()[-1].split("error: ", 1)[1]
    assert message == (f"{out}: already exists (draw-injections would replace it): give "
                       "another target, or --overwrite to replace it")
    assert out.read_bytes() == before
    assert main([*draw, "--overwrite"]) == 0  # the control
    assert len(read_injection_set(out)) == 11
