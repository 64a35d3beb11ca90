"""The campaign/reference comparison fails when it should: NaN, shifts, times, structure.

The files are written here with h5py in the output layout (gwpy TimeSeries attributes, a
``triggers`` table), not with the project's writer.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from offline_iaas.merge.output import TIME_TOLERANCE_SECONDS, compare_outputs

GPS = 1262304001.0
DX = 0.25
TOLERANCE = 1e-5


def write(path: Path, statistic: np.ndarray, x0: float = GPS, dx: float = DX,
          trigger_times: np.ndarray | None = None) -> Path:
    with h5py.File(path, "w") as f:
        name = f"statistic/{x0:.6f}".rstrip("0").rstrip(".")
        dataset = f.create_dataset(name, data=statistic.astype(np.float32))
        dataset.attrs.update({"x0": x0, "dx": dx, "channel": "H1L1:X", "name": "statistic",
                              "unit": "", "xunit": "s"})
        times = GPS + np.array([1.0, 7.5]) if trigger_times is None else trigger_times
        table = np.zeros(len(times), dtype=[("time", "f8"), ("statistic", "f4")])
        table["time"], table["statistic"] = times, [3.0, 4.0]
        f.create_dataset("triggers", data=table)
    return path


@pytest.fixture
def statistic() -> np.ndarray:
    return np.random.default_rng(0).standard_normal(64).astype(np.float32)


@pytest.fixture
def reference(tmp_path: Path, statistic: np.ndarray) -> Path:
    return write(tmp_path / "reference.h5", statistic)


def test_identical_outputs_pass(tmp_path: Path, reference: Path, statistic: np.ndarray) -> None:
    comparison = compare_outputs(write(tmp_path / "c.h5", statistic), reference)
    assert comparison.passes(TOLERANCE) and comparison.worst == 0.0
    assert set(comparison.relative) == {"statistic/1262304001", "triggers/statistic"}
    assert comparison.time_seconds["triggers/time"] == 0.0


def test_values_against_a_reference_of_zeros_fail(tmp_path: Path,
                                                  statistic: np.ndarray) -> None:
    """Strain-sized values against zeros are not a relative 1e-21: the comparison fails,
    where zeros on both sides pass."""
    zeros = write(tmp_path / "zeros.h5", np.zeros_like(statistic))
    tiny = write(tmp_path / "tiny.h5", statistic * np.float32(1e-21))
    comparison = compare_outputs(tiny, zeros)
    assert not comparison.passes(TOLERANCE)
    assert comparison.relative["statistic/1262304001"] == np.inf
    assert compare_outputs(write(tmp_path / "also_zeros.h5", np.zeros_like(statistic)),
                           zeros).passes(TOLERANCE)


def test_round_off_passes(tmp_path: Path, reference: Path, statistic: np.ndarray) -> None:
    nudged = statistic * np.float32(1 + 1e-7)
    assert compare_outputs(write(tmp_path / "c.h5", nudged), reference).passes(TOLERANCE)


@pytest.mark.parametrize("where", [0, 31, 63])
def test_a_nan_anywhere_fails(tmp_path: Path, reference: Path, statistic: np.ndarray,
                              where: int) -> None:
    broken = statistic.copy()
    broken[where] = np.nan
    comparison = compare_outputs(write(tmp_path / "c.h5", broken), reference)
    assert not comparison.passes(TOLERANCE)
    assert comparison.worst == float("inf")
    assert any("NaN or Inf in the campaign" in p for p in comparison.problems)


def test_a_nan_in_the_reference_fails(tmp_path: Path, statistic: np.ndarray) -> None:
    broken = statistic.copy()
    broken[5] = np.inf
    comparison = compare_outputs(write(tmp_path / "c.h5", statistic),
                                 write(tmp_path / "r.h5", broken))
    assert not comparison.passes(TOLERANCE)


def test_values_shifted_by_one_sample_fail(tmp_path: Path, reference: Path,
                                           statistic: np.ndarray) -> None:
    shifted = np.concatenate([statistic[1:], statistic[-1:]])
    assert not compare_outputs(write(tmp_path / "c.h5", shifted), reference).passes(TOLERANCE)


def test_time_axis_shifted_by_one_stride_fails(tmp_path: Path, reference: Path,
                                               statistic: np.ndarray) -> None:
    comparison = compare_outputs(write(tmp_path / "c.h5", statistic, x0=GPS + DX), reference)
    assert not comparison.passes(TOLERANCE)
    assert any("not in the" in p for p in comparison.problems)


def test_a_dropped_trailing_stride_fails(tmp_path: Path, reference: Path,
                                         statistic: np.ndarray) -> None:
    comparison = compare_outputs(write(tmp_path / "c.h5", statistic[:-1]), reference)
    assert not comparison.passes(TOLERANCE)


def test_trigger_times_are_compared_in_absolute_seconds(
    tmp_path: Path, reference: Path, statistic: np.ndarray
) -> None:
    # 1 ms is 8e-13 relative to a GPS time: a relative check would let it through
    late = GPS + np.array([1.0, 7.5 + 1e-3])
    comparison = compare_outputs(write(tmp_path / "c.h5", statistic, trigger_times=late),
                                 reference)
    assert comparison.time_seconds["triggers/time"] == pytest.approx(1e-3, rel=1e-3)
    assert not comparison.passes(TOLERANCE)
    within = GPS + np.array([1.0, 7.5 + 0.5 * TIME_TOLERANCE_SECONDS])
    assert compare_outputs(write(tmp_path / "d.h5", statistic, trigger_times=within),
                           reference).passes(TOLERANCE)


def test_an_extra_or_missing_dataset_fails(tmp_path: Path, reference: Path,
                                           statistic: np.ndarray) -> None:
    extra = write(tmp_path / "c.h5", statistic)
    with h5py.File(extra, "a") as f:
        f.create_dataset("statistic/1262309999", data=np.zeros(3, np.float32)).attrs.update(
            {"x0": 1262309999.0, "dx": DX})
    assert not compare_outputs(extra, reference).passes(TOLERANCE)
    assert not compare_outputs(reference, extra).passes(TOLERANCE)
