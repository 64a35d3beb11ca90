from pathlib import Path

import pytest

from offline_iaas import records
from offline_iaas.config import load_config
from offline_iaas.errors import ConfigError
from offline_iaas.job_specs import ClientJob
from offline_iaas.stretches import (
    client_shares,
    make_stretches,
    request_sizes,
    statistic_row_gps,
    whole_span,
)


def check_tiling(config, stretches, shares) -> None:
    """Pieces tile each stretch's kept windows exactly, each with one warm-up."""
    warmup = config.warmup_windows
    for stretch in stretches:
        pieces = sorted(
            (p for s in shares for p in s.pieces if p.stretch == stretch.index),
            key=lambda p: p.output_start,
        )
        expected = warmup
        for piece in pieces:
            assert piece.output_start == expected
            assert piece.warmup_windows == warmup
            assert piece.first_window >= 0
            assert (piece.stretch_gps_start, piece.stretch_gps_end) == (
                stretch.gps_start, stretch.gps_end
            )
            step = config.stride_samples / config.data.sample_rate
            assert piece.gps_start == stretch.gps_start + piece.first_window * step
            assert piece.gps_end == stretch.gps_start + piece.output_stop * step
            expected = piece.output_stop
        assert expected == stretch.windows(config.geometry)


@pytest.mark.parametrize(("servers", "per_server"), [(1, 1), (2, 2), (3, 2), (1, 7)])
def test_segments_tile_the_span_with_warmups(
    small_config_file: Path, servers: int, per_server: int
) -> None:
    config = load_config(
        small_config_file,
        [f"layout.servers={servers}", f"layout.clients_per_server={per_server}"],
    )
    shares = client_shares(config, sequence_base=1 << 20)
    assert len(shares) == servers * per_server
    check_tiling(config, whole_span(config), shares)
    sizes = [s.kept_windows for s in shares]
    assert max(sizes) - min(sizes) <= 1
    assert sum(sizes) == config.total_windows - config.warmup_windows
    ids: dict[str, set[int]] = {}
    for share in shares:
        assert share.server == f"server{share.index // per_server}"
        for piece in share.pieces:
            assert piece.sequence_id > 1 << 20
            assert piece.sequence_id not in ids.setdefault(share.server, set())
            ids[share.server].add(piece.sequence_id)
        job = ClientJob.of(share).model_dump_json()  # the job spec's JSON gives it back
        assert records.parse(ClientJob, job, Path(f"{share.node}.json")).share == share


def test_no_piece_spans_a_gap_and_shares_stay_balanced(small_config_file: Path) -> None:
    config = load_config(small_config_file, ["layout.servers=2", "layout.clients_per_server=2"])
    start = config.data.start
    stretches = make_stretches(config.geometry, [(start, start + 20), (start + 24, start + 41.5),
                                        (start + 50, start + 64)])
    shares = client_shares(config, stretches)
    check_tiling(config, stretches, shares)
    for share in shares:
        for piece in share.pieces:
            stretch = stretches[piece.stretch]
            assert stretch.gps_start <= piece.gps_start < piece.gps_end <= stretch.gps_end
    sizes = [s.kept_windows for s in shares]
    assert max(sizes) <= 1.05 * (sum(sizes) / len(sizes))
    assert any(len(share.pieces) > 1 for share in shares)  # a client crossing a gap gets two


def test_too_little_data_for_the_layout(small_config_file: Path) -> None:
    config = load_config(small_config_file, ["layout.clients_per_server=4"])
    start = config.data.start
    stretches = make_stretches(config.geometry, [(start, start + 1.5)])  # 6 windows, 3 of warm-up
    with pytest.raises(ConfigError, match="holds 3 windows, fewer than the 4"):
        client_shares(config, stretches)


def test_stretch_bounds_must_be_on_the_stride_grid(small_config_file: Path) -> None:
    config = load_config(small_config_file)
    with pytest.raises(ValueError, match="stride grid"):
        make_stretches(config.geometry, [(config.data.start + 0.1, config.data.start + 8)])


def test_warmup_covers_one_kernel(small_config_file: Path) -> None:
    # a kernel that is not a multiple of the stride
    config = load_config(small_config_file, ["model.kernel_seconds=1.25", "model.inference_rate=2"])
    assert config.kernel_samples == 320 and config.stride_samples == 128
    # windows are exact once (j + 1) * stride >= kernel: j >= 2
    assert config.warmup_windows == 2


def test_request_sizes_and_window_times(small_config_file: Path) -> None:
    assert request_sizes(20, 8) == [8, 8, 4]
    assert request_sizes(16, 8) == [8, 8]
    assert request_sizes(3, 8) == [3]
    config = load_config(small_config_file)
    start = whole_span(config)[0].gps_start
    assert statistic_row_gps(config.geometry, start, 0) == config.data.start + 0.25
