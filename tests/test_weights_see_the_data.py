"""The test weights (``helpers.untrained_weights``) make every compared output depend on the
data it is computed from, so that the campaign = reference = oracle tests would see a strain
or a witness one sample off.

The in-process reference runs the deepclean and e2e modes over SMALL_CAMPAIGN's frames, and
again over copies whose strain is one sample late, whose strain is zero, or whose witnesses
are one sample late. Every output group computed from the altered channels must change by
more than ``CHANGED`` (ten times the oracle's tolerance) in every dataset, and the others not
at all: DeepClean predicts the noise from the witnesses alone, so a strain change leaves
``noise`` as it is (the negative control of the comparison).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from offline_iaas.config import load_config
from offline_iaas.merge.output import read_outputs
from offline_iaas.merge.reference import run_reference
from offline_iaas.repository.export import export_repository
from tests.helpers import SMALL_CAMPAIGN, WITNESSES, untrained_weights

CHANGED = 1e-3
"""A changed output differs by more than this, relative to its largest value."""
STRAIN = ("H1:GDS-CALIB_STRAIN", "L1:GDS-CALIB_STRAIN")
DEPENDS: dict[str, dict[str, set[str]]] = {
    "deepclean": {"noise": {"witnesses"}, "clean": {"strain", "witnesses"}},
    "e2e": {"noise": {"witnesses"}, "clean": {"strain", "witnesses"},
            "statistic": {"strain", "witnesses"}},
}
"""Per mode, each compared output group and the channels it is computed from."""


def altered_frames(source: Path, target: Path, channels: list[str], change: str) -> None:
    """A copy of the frames with ``channels`` one sample late (``late``) or zero (``zero``)."""
    from gwpy.io.gwf import get_channel_names
    from gwpy.timeseries import TimeSeries, TimeSeriesDict

    target.mkdir(parents=True)
    for ifo in ("H1", "L1"):
        files = sorted(source.glob(f"{ifo[0]}-*.gwf"))
        names = [c for c in channels if c.startswith(ifo)]
        whole = {}
        for name in names:  # each channel as one series over every file (no seam)
            series = TimeSeriesDict.read([str(f) for f in files], [name], format="gwf")[name]
            values = np.asarray(series.value)
            values = np.concatenate([values[:1], values[:-1]]) if change == "late" else \
                np.zeros_like(values)
            whole[name] = (values, float(series.t0.value), float(series.sample_rate.value))
        for path in files:
            data = TimeSeriesDict.read(str(path), get_channel_names(str(path)), format="gwf")
            for name in names:
                values, t0, rate = whole[name]
                first = round((float(data[name].t0.value) - t0) * rate)
                data[name] = TimeSeries(values[first:first + len(data[name])],
                                        t0=data[name].t0, sample_rate=rate, name=name,
                                        channel=name)
            data.write(str(target / path.name), format="gwf")


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], dict]:
    """The reference's datasets per (mode, alteration)."""
    from offline_iaas.data.synth import write_synthetic_dataset

    root = tmp_path_factory.mktemp("see")
    (root / "campaign.toml").write_text(SMALL_CAMPAIGN)
    base = load_config(root / "campaign.toml", [f"data.witnesses={WITNESSES}"])
    write_synthetic_dataset(base)
    weights = untrained_weights(root / "weights")
    witnesses = list(base.data.witnesses)
    frames = {"as is": root / "frames"}
    for name, channels, change in (("strain late", STRAIN, "late"),
                                   ("strain zero", STRAIN, "zero"),
                                   ("witnesses late", witnesses, "late")):
        frames[name] = root / name.replace(" ", "-")
        altered_frames(root / "frames", frames[name], list(channels), change)
    frames["copy"] = root / "copy"  # the same bytes in another directory: run again
    shutil.copytree(root / "frames", frames["copy"])
    found = {}
    for mode in DEPENDS:
        repo = root / f"{mode}-repository"
        for name, directory in frames.items():
            config = load_config(root / "campaign.toml", [
                f"data.witnesses={WITNESSES}", f'model.mode="{mode}"',
                f'model.repository="{repo}"', f'data.frames="{directory}"'])
            if name == "as is":
                export_repository(config, weights)
            out = root / f"{mode}-{name.replace(' ', '-')}.h5"
            run_reference(config, out)
            found[(mode, name)] = read_outputs(out)
    shutil.rmtree(root / "weights")
    return found


def change_by_group(ours: dict, theirs: dict) -> dict[str, float]:
    """Per output group, the smallest of its datasets' largest relative difference."""
    groups: dict[str, float] = {}
    for name, series in theirs.items():
        group = name.split("/", 1)[0]
        if group not in ("noise", "clean", "statistic"):
            continue
        reference = np.asarray(series.values, dtype=np.float64)
        other = np.asarray(ours[name].values, dtype=np.float64)
        assert reference.shape == other.shape, name
        scale = np.max(np.abs(reference))
        assert scale > 0 and np.isfinite(scale), name
        change = float(np.max(np.abs(other - reference)) / scale)
        assert change == change, f"{name}: NaN"
        groups[group] = min(groups.get(group, np.inf), change)
    return groups


@pytest.mark.parametrize("mode", sorted(DEPENDS))
@pytest.mark.parametrize(("alteration", "channels"), [
    ("strain late", "strain"), ("strain zero", "strain"), ("witnesses late", "witnesses")])
def test_each_output_changes_with_the_channels_it_is_computed_from(
    outputs: dict, mode: str, alteration: str, channels: str,
) -> None:
    changes = change_by_group(outputs[(mode, alteration)], outputs[(mode, "as is")])
    print(f"\n{mode}, {alteration}: " + ", ".join(f"{k} {v:.2g}" for k, v in changes.items()))
    assert set(changes) == set(DEPENDS[mode])
    for group, inputs in DEPENDS[mode].items():
        if channels in inputs:
            assert changes[group] > CHANGED, (group, changes)
        else:
            assert changes[group] == 0.0, (group, changes)


def test_the_same_data_give_the_same_outputs(outputs: dict) -> None:  # negative control
    """A second run over a copy of the frames gives every output group bit for bit."""
    for mode in DEPENDS:
        again = change_by_group(outputs[(mode, "copy")], outputs[(mode, "as is")])
        assert again == dict.fromkeys(DEPENDS[mode], 0.0), (mode, again)
