from pathlib import Path

import pytest

from offline_iaas.config import load_config
from offline_iaas.workflow.plan import plan_segments, request_sizes, window_gps


@pytest.mark.parametrize(("servers", "per_server"), [(1, 1), (2, 2), (3, 2), (1, 7)])
def test_segments_tile_the_span_with_warmups(
    small_config_file: Path, servers: int, per_server: int
) -> None:
    config = load_config(
        small_config_file,
        [f"layout.servers={servers}", f"layout.clients_per_server={per_server}"],
    )
    segments = plan_segments(config, sequence_base=1 << 20)
    assert len(segments) == servers * per_server
    assert segments[0].output_start == 0 and segments[0].warmup_windows == 0
    assert segments[-1].output_stop == config.total_windows
    for before, after in zip(segments, segments[1:], strict=False):
        assert after.output_start == before.output_stop
        assert after.warmup_windows == config.warmup_windows
    sizes = [s.output_stop - s.output_start for s in segments]
    assert max(sizes) - min(sizes) <= 1
    stride = config.stride_samples / config.data.sample_rate
    for seg in segments:
        assert seg.gps_start == config.data.start + seg.first_window * stride
        assert seg.gps_end == config.data.start + seg.output_stop * stride
        assert seg.server == f"server{seg.index // per_server}"
    by_server: dict[str, set[int]] = {}
    for seg in segments:
        ids = by_server.setdefault(seg.server, set())
        assert seg.sequence_id not in ids and seg.sequence_id > 0
        ids.add(seg.sequence_id)


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
    assert window_gps(config, 0) == config.data.start + 0.25
