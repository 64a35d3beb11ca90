"""The core asks an output's shape, not its name: per window (the statistic, the slides'
background, e2e's ``_raw`` twins) or per sample, one series per detector (DeepClean's noise
and its canary's); the index stitches the groups each mode writes; e2e's raw-search estimate
finds its workload by the mode records. The expected lists are written out by hand (what
each mode's merge file holds), not derived from the code under test."""

from __future__ import annotations

import pytest

from offline_iaas.bench.workloads import BBHNET, DEEPCLEAN, network_workload
from offline_iaas.errors import ConfigError
from offline_iaas.merge.layout import series_groups
from offline_iaas.mode_packages import find_mode
from offline_iaas.modes import Outputs, per_sample


def _outputs(mode: str, *, canary: bool = False, slides: bool = False,
             inject: bool = False) -> Outputs:
    names = find_mode(mode).output_names(canary=canary, has_slides=slides, inject=inject)
    return Outputs(names, ifos=2, stride_samples=64, slides=3 if slides else 0)


def test_outputs_are_per_window_or_per_sample_whichever_strain_they_searched() -> None:
    for name in ("statistic", "background", "statistic_raw", "background_raw"):
        assert not per_sample(name), name
    for name in ("noise", "noise_canary"):
        assert per_sample(name), name
    e2e = _outputs("e2e", canary=True, slides=True, inject=True)
    assert e2e.names == ("noise", "statistic", "noise_canary", "background", "statistic_raw",
                         "background_raw")
    assert e2e.sample_series == ("noise", "noise_canary")
    assert _outputs("bbhnet", slides=True).sample_series == ()
    assert e2e.row_shape("noise_canary") == (2, 64)
    assert e2e.row_shape("background_raw") == (3,)


@pytest.mark.parametrize(("mode", "canary", "expected"), [
    ("classifier", False, {"statistic", "slides"}),
    ("bbhnet", False, {"statistic", "slides"}),
    ("deepclean", False, {"statistic", "slides", "noise", "clean", "clean_canary"}),
    ("deepclean", True, {"statistic", "slides", "noise", "noise_canary", "clean",
                         "clean_canary"}),
    ("e2e", True, {"statistic", "slides", "noise", "noise_canary", "clean", "clean_canary"}),
])
def test_the_index_stitches_the_series_groups_each_mode_writes(
        mode: str, canary: bool, expected: set[str]) -> None:
    groups = series_groups(mode, _outputs(mode, canary=canary))
    assert set(groups) == expected
    assert groups[:2] == ("statistic", "slides")  # per window first
    assert len(groups) == len(set(groups))


def test_a_mode_without_a_package_stitches_only_its_per_window_series() -> None:
    # the control: no package's products, no per-sample output
    assert series_groups("not-a-mode", Outputs(("statistic",), 2, 64, 0)) == (
        "statistic", "slides")


def test_deepclean_s_cleaned_strain_groups_are_those_its_products_write() -> None:
    from offline_iaas.science.deepclean.products import CANARY, PRODUCTION
    from offline_iaas.science.deepclean.settings import SERIES_PRODUCTS

    assert SERIES_PRODUCTS == (PRODUCTION.clean, CANARY.clean)


def test_the_raw_search_is_estimated_from_the_workload_of_the_mode_serving_its_network() -> None:
    assert network_workload(find_mode("e2e").statistic_network) is BBHNET
    assert network_workload("deepclean") is DEEPCLEAN
    with pytest.raises(ConfigError, match="'power'"):
        network_workload("power")
