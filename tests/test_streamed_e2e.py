"""e2e streamed layer by layer (``model.streamed``, issue #42).

DeepClean runs as a ``streamed`` stage on the update (its window predictions into the
unchanged online average; the snapshotter stays for the subtraction's windows), and BBHnet on
the cleaned strain as another (no second snapshotter, no windows), with ``search.inject`` a
third on the raw strain (``bbhnet_raw``, its own state, BBHnet's graphs). Checked on the
injections module's 32-s e2e frames (2 injections on the fly, untrained weights): in process,
the noise, the cleaned strain and every statistic (cleaned, raw, the foreground's) equal the
whole-window chain's within ``WHOLE_WINDOW_BOUND`` and one window late fails (measured at
``4c89ecc``: noise 5.4e-7 and 4.3e-7, cleaned strain 7.0e-8 and 8.6e-8, statistic 1.5e-6; at
most 1.3e-6 with the edge cones, ``pytest -s`` at ``7af0f09`` and ``ed976e3``); served, the streamed
campaign equals its reference.
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from offline_iaas.data.synth import INJECTION_SET
from offline_iaas.merge.output import compare_outputs
from offline_iaas.repository.pipeline import stages
from offline_iaas.repository.served import check_repository
from tests.helpers import WITNESSES, relative_difference, run_dag, untrained_weights
from tests.oracle import read_series
from tests.streamed_runs import exported_both_ways
from tests.test_injections_on_the_fly import foreground_of, write_baked_and_clean

pytest.importorskip("torch")

WHOLE_WINDOW_BOUND = 1e-5
"""Streamed statistic against the whole-window one, relative to its largest value (as
``tests/test_streamed_campaign.py``)."""


@pytest.fixture(scope="module")
def chains(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Clean frames and the set baked elsewhere; the e2e campaign with injections on the fly
    exported streamed and whole-window (one set of weights), and both references."""
    root = tmp_path_factory.mktemp("streamed-e2e")
    write_baked_and_clean(root)
    weights = untrained_weights(root / "weights")
    base = ['model.mode="e2e"', f"data.witnesses={WITNESSES}", "search.inject=true",
            f'search.injections="{root / "baked" / INJECTION_SET}"',
            f'data.frames="{root / "clean"}"']
    return {"root": root, **exported_both_ways(root / "clean.toml", base, root, weights)}


def test_e2e_streams_deepclean_and_bbhnet_on_the_cleaned_and_the_raw_strain(chains) -> None:
    chain = {stage.model: stage for stage in stages(chains["streamed"])}
    assert {"snapshotter_clean", "snapshotter_raw"} & set(chain) == set()
    assert chain["snapshotter"].kind == "snapshot"  # the subtraction's windows
    assert (chain["deepclean"].kind, chain["deepclean"].inputs) == ("streamed",
                                                                    {"update": "update"})
    assert (chain["bbhnet"].kind, chain["bbhnet"].inputs) == ("streamed", {"update": "cleaned"})
    assert (chain["bbhnet_raw"].kind, chain["bbhnet_raw"].inputs) == ("streamed",
                                                                      {"update": "raw"})
    assert chain["bbhnet"].params == chain["bbhnet_raw"].params == {"network": "bbhnet"}
    manifest = check_repository(chains["streamed"], load_graphs=True)
    assert set(manifest.streamed) == {"deepclean", "bbhnet"}  # one BBHnet for both searches


def test_the_streamed_e2e_reference_equals_the_whole_window_chain(chains) -> None:
    streamed, whole = read_series(chains["streamed_out"]), read_series(chains["whole_out"])
    (_, _, mine), (_, _, theirs) = streamed["statistic"][0], whole["statistic"][0]
    assert mine.shape == theirs.shape and len(mine) > 100
    print(f"statistic: relative error {relative_difference(mine, theirs):.2e}")
    assert relative_difference(mine, theirs) <= WHOLE_WINDOW_BOUND
    late = np.concatenate([theirs[:1], theirs[:-1]])  # negative control: a window late
    assert relative_difference(mine, late) > 100 * WHOLE_WINDOW_BOUND
    for name in ("noise/H1", "noise/L1", "clean/H1", "clean/L1"):
        (_, _, mine), (_, _, theirs) = streamed[name][0], whole[name][0]
        assert mine.shape == theirs.shape
        print(f"{name}: relative error {relative_difference(mine, theirs):.2e}")
        assert relative_difference(mine, theirs) <= WHOLE_WINDOW_BOUND, name
        late = np.concatenate([theirs[:1], theirs[:-1]])  # a sample late
        assert relative_difference(mine, late) > 100 * WHOLE_WINDOW_BOUND, name
    # the foreground: the cleaned search and the raw one (bbhnet_raw's own stream)
    mine, theirs = foreground_of(chains["streamed_out"]), foreground_of(chains["whole_out"])
    assert len(mine) > 3 and np.array_equal(mine["time"], theirs["time"])
    for name in ("statistic", "statistic_raw"):
        difference = relative_difference(mine[name], theirs[name])
        print(f"foreground {name}: relative error {difference:.2e}")
        assert difference <= WHOLE_WINDOW_BOUND, name
        late = np.roll(theirs[name], 1)
        assert relative_difference(mine[name], late) > 100 * WHOLE_WINDOW_BOUND
    with h5py.File(chains["streamed_out"]) as a, h5py.File(chains["whole_out"]) as b:
        mine, theirs = a["triggers_raw"][()], b["triggers_raw"][()]
    assert len(mine) > 3 and np.array_equal(mine["time"], theirs["time"])
    assert relative_difference(mine["statistic"], theirs["statistic"]) <= WHOLE_WINDOW_BOUND
    late = np.roll(theirs["statistic"], 1)  # the control: a trigger late
    assert relative_difference(mine["statistic"], late) > 100 * WHOLE_WINDOW_BOUND


@pytest.mark.slow
def test_a_streamed_e2e_campaign_equals_its_reference(chains) -> None:
    config = chains["streamed"]
    run_dir = run_dag(config, chains["root"] / "run")
    comparison = compare_outputs(run_dir / "output" / "campaign.h5", chains["streamed_out"])
    assert comparison.problems == [] and comparison.worst <= 1e-5, comparison.describe()
