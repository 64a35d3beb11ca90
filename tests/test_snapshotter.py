import numpy as np
import pytest

from offline_iaas.repository.backend.stateful import SnapshotState
from tests.helpers import a_sample_late


def naive_windows(data: np.ndarray, kernel: int, stride: int) -> np.ndarray:
    padded = np.concatenate([np.zeros((data.shape[0], kernel), np.float32), data], axis=1)
    count = data.shape[1] // stride
    return np.stack([padded[:, (j + 1) * stride : (j + 1) * stride + kernel] for j in range(count)])


@pytest.mark.parametrize("splits", [[96], [32, 64], [16, 16, 48, 16]])
def test_windows_do_not_depend_on_how_updates_are_split(splits: list[int]) -> None:
    rng = np.random.default_rng(1)
    data = rng.standard_normal((3, sum(splits))).astype(np.float32)
    state = SnapshotState(3, kernel_samples=40, stride_samples=16)
    pieces, offset = [], 0
    for n in splits:
        pieces.append(state.update(data[:, offset : offset + n]))
        offset += n
    got = np.concatenate(pieces)
    np.testing.assert_array_equal(got, naive_windows(data, 40, 16))
    late = a_sample_late(data)
    assert not np.array_equal(got, naive_windows(late, 40, 16))  # the control
    np.testing.assert_array_equal(state.state, data[:, -40:])


def test_update_must_be_whole_strides() -> None:
    state = SnapshotState(1, kernel_samples=8, stride_samples=4)
    with pytest.raises(ValueError, match="not a multiple of the stride"):
        state.update(np.zeros((1, 6), np.float32))


def test_the_online_average_needs_a_kernel_of_whole_strides_longer_than_one() -> None:
    from offline_iaas.repository.backend.stateful import OnlineAverage

    with pytest.raises(ValueError, match="multiple of the stride"):
        OnlineAverage(16, 16)
    with pytest.raises(ValueError, match="multiple of the stride"):
        OnlineAverage(40, 12)
    assert OnlineAverage(40, 8).overlap == 5
