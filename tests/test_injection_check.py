"""``check`` and ``make-dag`` read ``search.injections`` before anything runs
(``search/injection_check.check_injections``): a missing, truncated or column-lacking list is
refused on one line naming the file; where the injections lie (held out, in the training
span, outside the analysed span) is said, and none to count is a warning."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import h5py
import pytest

from offline_iaas.config import config_from_dict, load_config
from offline_iaas.data.synth import write_synthetic_dataset
from offline_iaas.errors import ConfigError, DataError
from offline_iaas.search.injection_check import check_injections
from offline_iaas.search.injection_file import InjectionSet, write_injection_set
from offline_iaas.search.waveforms import BinaryParameters
from tests.helpers import SMALL_CAMPAIGN

START = 1262304000.0


def config_with(tmp_path: Path, injections: Path | None, mode: str = "bbhnet"):
    raw = {"data": {"frames": "f", "channels": ["H1:X", "L1:X"], "start": START,
                    "duration": 1000, "sample_rate": 16},
           "model": {"repository": "r", "mode": mode, "inference_rate": 4}}
    if injections is not None:
        raw["search"] = {"injections": str(injections)}
    return config_from_dict(raw, tmp_path / "c.toml")


def listed(tmp_path: Path, seconds: list[float]) -> Path:
    """A synth.json-like list with injections at ``START + seconds``."""
    path = tmp_path / "synth.json"
    path.write_text(json.dumps({
        "population": {"redshift_max": 0.5, "time_volume_gpc3": 10.0},
        "injections": [{"gps_time": START + s, "network_snr": 10.0} for s in seconds]}))
    return path


STRETCHES = [(START, START + 400.0), (START + 600.0, START + 1000.0)]


def test_the_check_says_where_the_injections_lie(tmp_path: Path) -> None:
    path = listed(tmp_path, [50.0, 150.0, 450.0, 600.5, 700.0, 900.0])
    found = check_injections(config_with(tmp_path, path), STRETCHES,
                             {"bbhnet": (START, START + 100.0)})
    # 50 in training; 450 in the gap; 600.5 in the second stretch's warm-up (from 600.75)
    assert found.counts == {"listed": 6, "held_out": 3, "in_training": 1,
                            "outside_analysed": 2}
    assert found.described and found.warnings() == []
    [line] = found.lines()
    assert line == (f"injection list {path}: 6 injections, 3 held out in the analysed span, 1 "
                    "in BBHnet's training span (GPS 1262304000-1262304100), 2 outside the "
                    "analysed span; its population described")
    # control: without a training span the injection at 50 s is held out
    assert check_injections(config_with(tmp_path, path), STRETCHES, {}).counts[
        "held_out"] == 4


def test_the_check_of_an_e2e_campaign_leaves_out_deepcleans_training_spans_too(
        tmp_path: Path) -> None:
    path = listed(tmp_path, [50.0, 150.0, 700.0])
    raw = {"data": {"frames": "f", "channels": ["H1:X", "L1:X"], "witnesses": ["H1:W", "L1:W"],
                    "start": START, "duration": 1000, "sample_rate": 256},
           "model": {"repository": "r", "mode": "e2e", "inference_rate": 4},
           "search": {"injections": str(path)}}
    config = config_from_dict(raw, tmp_path / "c.toml")
    bbhnet = {"bbhnet": (START + 100.0, START + 200.0)}
    found = check_injections(config, STRETCHES, {"deepclean-H1": (START, START + 100.0),
                                                 "deepclean-L1": (START, START + 80.0), **bbhnet})
    assert (found.counts["in_training"], found.counts["held_out"]) == (2, 1)
    assert ("2 in the training spans of deepclean-H1 (GPS 1262304000-1262304100), deepclean-L1 "
            "(GPS 1262304000-1262304080) and bbhnet (GPS 1262304100-1262304200)"
            ) in found.lines()[0]
    # control: BBHnet's span alone holds out the injection in DeepClean's training data
    assert check_injections(config, STRETCHES, bbhnet).counts["held_out"] == 2


def test_no_injection_to_count_is_a_warning(tmp_path: Path) -> None:
    path = listed(tmp_path, [450.0, 1500.0])
    found = check_injections(config_with(tmp_path, path), STRETCHES, {})
    assert found.counts["held_out"] == 0
    [warning] = found.warnings()
    assert warning.startswith("search.injections: none of the 2 injections of ")
    assert "no found/missed injection and no VT" in warning


def test_no_list_or_a_mode_without_triggers_is_not_checked(tmp_path: Path) -> None:
    assert check_injections(config_with(tmp_path, None), STRETCHES, {}) is None
    missing = tmp_path / "nowhere.json"
    assert check_injections(config_with(tmp_path, missing, "classifier"), STRETCHES,
                            {}) is None


def injection_set(path: Path) -> Path:
    binary = BinaryParameters(mass_1=30.0, mass_2=25.0, redshift=0.1, luminosity_distance=460.0,
                              inclination=0.3, polarization=0.2, ra=1.0, dec=0.5,
                              coalescence_phase=0.1, gps_time=START + 700.0)
    write_injection_set(path, InjectionSet((binary,), "IMRPhenomD", 20.0,
                                           {"H1": (8.0,), "L1": (6.0,)}))
    return path


def truncated(path: Path) -> Path:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def without_column(path: Path) -> Path:
    with h5py.File(path, "r+") as f:
        del f["parameters/injection_time"]
    return path


BAD_LISTS = {
    "missing": (lambda d: d / "nowhere.h5", ConfigError, "nowhere.h5 does not exist"),
    "missing-json": (lambda d: d / "nowhere.json", ConfigError, "nowhere.json does not exist"),
    "truncated-json": (lambda d: truncated(listed(d, [700.0])), ConfigError, "not JSON"),
    "truncated-hdf5": (lambda d: truncated(injection_set(d / "set.h5")), DataError,
                       "not a readable HDF5 file"),
    "column-lacking": (lambda d: without_column(injection_set(d / "set.h5")), DataError,
                       "no column 'parameters/injection_time'"),
}


@pytest.mark.parametrize("case", sorted(BAD_LISTS))
def test_a_bad_list_is_refused_on_one_line_naming_it(case: str, tmp_path: Path) -> None:
    make, error, what = BAD_LISTS[case]
    path = make(tmp_path)
    with pytest.raises(error) as raised:
        check_injections(config_with(tmp_path, path), STRETCHES, {})
    message = str(raised.value)
    assert message.startswith("search.injections: ") and str(path) in message
    assert what in message and "\n" not in message


def test_a_good_set_without_a_population_is_read(tmp_path: Path) -> None:
    path = injection_set(tmp_path / "set.h5")
    found = check_injections(config_with(tmp_path, path), STRETCHES, {})
    assert found.counts["held_out"] == 1 and not found.described
    assert "no population described: found fractions, no VT" in found.lines()[0]


# ---- through the command line ----------------------------------------------------------------


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small campaign's frames and synth.json (mode bbhnet; no model repository)."""
    root = tmp_path_factory.mktemp("injection-check")
    (root / "campaign.toml").write_text(SMALL_CAMPAIGN)
    write_synthetic_dataset(load_config(root / "campaign.toml"))
    return root


def cli(ws: Path, command: str, injections: Path, *more: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "offline_iaas.cli", command, str(ws / "campaign.toml"),
         "--set", 'model.mode="bbhnet"', "--set", f'search.injections="{injections}"', *more],
        capture_output=True, text=True, timeout=300)


def test_check_counts_the_injections_of_the_list(workspace: Path) -> None:
    done = cli(workspace, "check", workspace / "frames" / "synth.json")
    assert done.returncode == 0, done.stderr
    assert (f"check: injection list {workspace / 'frames' / 'synth.json'}: 1 injections, 1 "
            "held out in the analysed span") in done.stdout


def test_make_dag_refuses_a_truncated_list_before_writing_anything(workspace: Path,
                                                                    tmp_path: Path) -> None:
    bad = truncated(injection_set(tmp_path / "set.h5"))
    run = tmp_path / "run"
    done = cli(workspace, "make-dag", bad, "--out", str(run))
    # 3: a data error; the missing model repository (4) was not reached
    assert done.returncode == 3, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"offline-iaas make-dag: error: search.injections: {bad}: ")
    assert not run.exists()


# ---- the merge ---------------------------------------------------------------------------------


def merge_numbers(tmp_path: Path, seconds: list[float], population: dict | None,
                  distances: list[float] | None = None,
                  training: dict[str, tuple[float, float]] | None = None,
                  snr: float = 10.0, snr_design: float = math.nan) -> tuple[dict, list[str]]:
    """The merge's injection numbers (no time slides) for injections at ``START + seconds``
    (network SNR ``snr``, against the design PSD ``snr_design``), one trigger on each, over
    STRETCHES; with its log lines."""
    import numpy as np

    from offline_iaas.physics import Injection
    from offline_iaas.science.bbhnet.injections import injection_results
    from offline_iaas.search.injection_list import InjectionList
    from offline_iaas.stretches import make_stretches, statistic_spans
    from tests.helpers import captured_log

    config = config_with(tmp_path, tmp_path / "unused.json")
    distances = distances or [math.nan] * len(seconds)
    listed = InjectionList(tmp_path / "list.json", tuple(
        Injection(START + s, snr, 30.0, d, snr_design)
        for s, d in zip(seconds, distances, strict=True)),
        population)
    analysed = statistic_spans(config.geometry, make_stretches(config.geometry, STRETCHES))
    times = np.array([START + s for s in seconds] + [START + 300.0])
    values = np.array([9.0] * len(seconds) + [1.0])
    with captured_log() as lines:
        result = injection_results(config.search, listed, times, values, None, analysed,
                                   training or {}, None)
    return result, lines


def test_the_merge_warns_when_every_injection_lies_outside_the_analysed_span(
        tmp_path: Path) -> None:
    result, lines = merge_numbers(tmp_path, [450.0, 1500.0], None)
    assert result["injection_counts"] == {"listed": 2, "outside_analysed": 2, "in_training": 0,
                                          "held_out": 0}
    assert (result["found"], result["missed"]) == (0, 0)
    [warning] = [line for line in lines if "none of the 2 injections" in line]
    assert "2 outside the analysed span (GPS 1262304001-1262305000)" in warning
    # control: one injection inside is counted, and nothing is said
    result, lines = merge_numbers(tmp_path, [450.0, 700.0], None)
    assert result["injection_counts"]["held_out"] == 1 and result["found"] == 1
    assert not any("none of the" in line for line in lines)


def test_the_merge_warns_when_injections_near_z_max_are_found(tmp_path: Path) -> None:
    population = {"luminosity_distance_max_mpc": 2000.0, "redshift_max": 0.4}
    result, lines = merge_numbers(tmp_path, [150.0, 700.0], population, [1900.0, 500.0])
    assert result["volume_bound"]["found_near_edge"] == 1
    assert any("the drawn volume, not the search, bounds VT" in line for line in lines)
    result, lines = merge_numbers(tmp_path, [150.0, 700.0], population, [1700.0, 500.0])
    assert result["volume_bound"]["found_near_edge"] == 0
    assert not any("bounds VT" in line for line in lines)


def test_the_merge_warns_when_injections_just_above_the_snr_cut_are_found(
        tmp_path: Path) -> None:
    from offline_iaas.science.bbhnet.sensitivity import cut_bound

    population = {"network_snr_min": 8.5}
    result, lines = merge_numbers(tmp_path, [150.0, 700.0], population)  # SNR 10 < 1.25 x 8.5
    assert result["snr_cut_bound"]["found_near_cut"] == 2
    assert result["snr_cut_bound"]["quietest_found_snr"] == 10.0
    assert any("close to the population's cut at 8.5" in line for line in lines)
    # controls: a cut of 7 (10 >= 8.75) says nothing, and none without a cut
    result, lines = merge_numbers(tmp_path, [150.0, 700.0], {"network_snr_min": 7.0})
    assert result["snr_cut_bound"]["found_near_cut"] == 0
    assert not any("cut at" in line for line in lines)
    assert cut_bound([{"network_snr": 5.0, "found": True}], {"network_snr_min": 0.0}) is None
    assert cut_bound([{"network_snr": 5.0, "found": False}],
                     {"network_snr_min": 4.5})["found_near_cut"] == 0  # missed: not counted


def test_the_merge_line_says_how_many_injections_it_left_out_and_why(tmp_path: Path) -> None:
    from offline_iaas.science.bbhnet.injections import injection_lines
    from offline_iaas.science.bbhnet.summary import SearchNumbers
    from offline_iaas.summary_physics import section

    # 150 s in the training span, 450 s in the gap between the stretches
    result, _ = merge_numbers(tmp_path, [150.0, 450.0, 700.0, 900.0], None,
                              training={"bbhnet": (START, START + 200.0)})
    assert result["injection_counts"] == {"listed": 4, "held_out": 2, "in_training": 1,
                                          "outside_analysed": 1}
    lines = injection_lines(section(SearchNumbers, {"triggers": 0, "cluster_seconds": 1.0,
                                                    **result}))
    assert lines[0].startswith("BBHnet: 2 found, 0 missed of 2 held-out injections")
    assert lines[1] == ("BBHnet: injections: 4 listed, 2 held out; left out of found/missed "
                        "and VT: 1 in BBHnet's training span (GPS 1262304000-1262304200), 1 "
                        "outside the analysed span")
    # control: without the training span the injection at 150 s is counted
    counted, _ = merge_numbers(tmp_path, [150.0, 450.0, 700.0, 900.0], None)
    assert counted["found"] == 3


def test_the_snr_cut_bound_compares_the_snr_the_population_was_cut_on(tmp_path: Path) -> None:
    from offline_iaas.science.bbhnet.sensitivity import cut_bound

    synth = {"network_snr_min": 8.0}  # synth's cut: on the SNR against the design PSD
    # measured below the cut (it scatters), design far above: not near the cut
    result, lines = merge_numbers(tmp_path, [150.0, 700.0], synth, snr=7.5, snr_design=12.0)
    assert result["found"] == 2 and result["snr_cut_bound"]["found_near_cut"] == 0
    assert result["snr_cut_bound"]["quietest_found_snr"] == 12.0
    assert result["injections"][0]["network_snr_design"] == 12.0
    assert not any("cut at" in line for line in lines)
    # converse: measured far above, design just above the cut: near it
    result, lines = merge_numbers(tmp_path, [150.0, 700.0], synth, snr=12.0, snr_design=9.0)
    assert result["snr_cut_bound"]["found_near_cut"] == 2
    assert any("close to the population's cut at 8" in line for line in lines)
    # a list without design SNRs (draw-injections cuts on the SNR it lists): that one
    assert cut_bound([{"network_snr": 9.0, "found": True}], synth)["found_near_cut"] == 1
    assert cut_bound([{"network_snr": 12.0, "found": True}], synth)["found_near_cut"] == 0


def test_the_lists_give_the_design_snr_where_they_record_it(tmp_path: Path) -> None:
    import json

    import numpy as np

    from offline_iaas.search.injection_file import read_injection_list
    from offline_iaas.search.injections_hdf5 import write_hdf5
    from tests.injection_samples import sample_set

    injections = sample_set(3)
    write_hdf5(tmp_path / "set.h5", injections)
    listed, _ = read_injection_list(tmp_path / "set.h5")
    assert np.allclose([i.network_snr_design for i in listed], injections.network_snr_design)
    assert np.allclose([i.network_snr for i in listed], injections.network_snr)
    rows = [{"gps_time": START + 100.0, "network_snr": 7.5, "network_snr_design": 12.0},
            {"gps_time": START + 200.0, "network_snr": 9.0}]  # control: none recorded
    (tmp_path / "list.json").write_text(json.dumps(rows))
    with_design, without = read_injection_list(tmp_path / "list.json")[0]
    assert with_design.network_snr_design == 12.0 and with_design.row()["network_snr"] == 7.5
    assert math.isnan(without.network_snr_design)
    assert "network_snr_design" not in without.row()
