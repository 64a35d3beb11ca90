"""Hostile and broken clients against a running campaign server (issue #19).

One locked-down tritonserver serves a classifier campaign's fused model. In every test a
well-behaved sequence streams half its data, the hostile or broken client does its thing, the
good sequence streams the rest, and its output must equal the in-process reference; the
server's count of sequences it holds (the fused model's ``offline_iaas_live_sequences``
metric) must come back to zero. Each case's answer is catalogued in ``docs/errors.md``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from offline_iaas.bench.server import BenchServer, bench_server
from offline_iaas.config import CampaignConfig, load_config
from offline_iaas.manifest import read_manifest
from offline_iaas.repository.export import export_repository
from offline_iaas.repository.pipeline import mode_stream
from offline_iaas.repository.served import network_sessions
from offline_iaas.rundir import RunDir
from tests.error_catalogue import documented
from tests.helpers import SMALL_CAMPAIGN, wait_for

pytestmark = pytest.mark.slow

IDLE_SECONDS = 5.0
"""``server.sequence_idle_seconds``: the fused model drops a silent sequence after twice it
(the good sequence must not go silent that long between its parts on a loaded machine)."""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[CampaignConfig,
                                                                      BenchServer]]:
    root = tmp_path_factory.mktemp("hostile")
    (root / "campaign.toml").write_text(SMALL_CAMPAIGN)
    config = load_config(root / "campaign.toml", [
        f'model.repository="{root / "model-repository"}"',
        f"server.sequence_idle_seconds={IDLE_SECONDS}",
    ])
    export_repository(config)
    models = list(read_manifest(config.model.repository).models)
    with bench_server(config.model.repository, RunDir(root / "server"), models) as server:
        yield config, server


def refused(row: str, error: InferenceServerException, status: str) -> None:
    """The server's answer is gRPC ``status`` and the message of ``row`` of docs/errors.md."""
    assert error.status() == f"StatusCode.{status}", error
    documented(row, error.message())


def live_sequences(server: BenchServer) -> int:
    """The sequences the fused model holds now (summed over instances), from Triton's metrics."""
    text = requests.get(f"http://127.0.0.1:{server.ports.metrics}/metrics", timeout=10).text
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith("offline_iaas_live_sequences{")]
    assert values, "the fused model exports no offline_iaas_live_sequences metric"
    return int(sum(values))


def wait_for_zero(server: BenchServer, seconds: float) -> float:
    """Seconds until the fused model holds no sequence (Triton's metrics, asked every 0.5 s)."""
    return wait_for(lambda: live_sequences(server) == 0, seconds,
                    lambda: f"the state released: {live_sequences(server)} sequence(s) still "
                            f"held after {seconds} s", poll_seconds=0.5)


def infer(config: CampaignConfig, server: BenchServer, update: np.ndarray, corrid: int,
          start: bool, end: bool, headers: dict[str, str] | None = None,
          name: str = "update", dtype: str = "FP32") -> np.ndarray:
    with grpcclient.InferenceServerClient(server.url) as client:
        tensor = grpcclient.InferInput(name, list(update.shape), dtype)
        tensor.set_data_from_numpy(update)
        result = client.infer(config.model.name, [tensor], sequence_id=corrid,
                              sequence_start=start, sequence_end=end,
                              headers=server.headers if headers is None else headers)
        return result.as_numpy("statistic")[0]


class GoodSequence:
    """A well-behaved client: its stream in parts (of 3 strides) around the hostile act, which
    may call ``keep_alive`` (a live client does not go quiet for ``IDLE_SECONDS``)."""

    PARTS = 16

    def __init__(self, config: CampaignConfig, server: BenchServer, corrid: int) -> None:
        self.config, self.server, self.corrid = config, server, corrid
        stride = config.stride_samples
        rng = np.random.default_rng(corrid)
        self.samples = (rng.standard_normal((2, 3 * self.PARTS * stride)) * 1e-21).astype(
            np.float32)
        self.parts = np.split(self.samples, self.PARTS, axis=1)
        self.got: list[np.ndarray] = []

    def send(self, number: int) -> None:
        self.got.append(infer(self.config, self.server, self.parts[number][None], self.corrid,
                              number == 0, number == self.PARTS - 1))

    def keep_alive(self) -> None:
        """An empty update (no samples: no windows, the state unchanged)."""
        self.got.append(infer(self.config, self.server, np.zeros((1, 2, 0), np.float32),
                              self.corrid, False, False))

    def first_half(self) -> None:
        for number in range(self.PARTS // 2):
            self.send(number)

    def second_half_equals_the_reference(self) -> None:
        for number in range(self.PARTS // 2, self.PARTS):
            self.send(number)
        expected = mode_stream(self.config, network_sessions(self.config)).update(self.samples)
        got = np.concatenate(self.got)
        assert np.isfinite(got).all() and np.isfinite(expected["statistic"]).all()
        np.testing.assert_allclose(got, expected["statistic"], rtol=1e-5, atol=1e-6,
                                   equal_nan=False)
        assert not np.allclose(got[1:], expected["statistic"][:-1], rtol=1e-5, atol=1e-6)


def around(served, corrid: int, hostile) -> None:
    config, server = served
    wait_for_zero(server, 4 * IDLE_SECONDS + 10)  # nothing left by an earlier test
    good = GoodSequence(config, server, corrid)
    good.first_half()
    hostile(config, server, good)
    good.second_half_equals_the_reference()
    wait_for_zero(server, 4 * IDLE_SECONDS + 10)  # asserts the state is released in time


def test_wrong_shape_is_refused(served) -> None:
    def hostile(config, server, good):
        update = np.zeros((1, 3, 64), np.float32)  # three channels, the campaign streams two
        with pytest.raises(InferenceServerException, match="unexpected shape for input "
                           "'update'.*Expected \\[-1,2,-1\\], got \\[1,3,64\\]") as caught:
            infer(config, server, update, 901, True, True)
        refused("hostile-wrong-shape", caught.value, "INVALID_ARGUMENT")
    around(served, 11, hostile)


def test_wrong_dtype_is_refused(served) -> None:
    def hostile(config, server, good):
        update = np.zeros((1, 2, 64), np.float64)
        with pytest.raises(InferenceServerException, match="data-type is 'FP64', but model "
                           "'offline-iaas' expects 'FP32'") as caught:
            infer(config, server, update, 902, True, True, dtype="FP64")
        refused("hostile-wrong-dtype", caught.value, "INVALID_ARGUMENT")
    around(served, 12, hostile)


def test_a_request_without_start_is_refused(served) -> None:
    def hostile(config, server, good):
        with pytest.raises(InferenceServerException, match="must specify the START "
                           "flag") as caught:
            infer(config, server, np.zeros((1, 2, 64), np.float32), 903, False, False)
        refused("hostile-no-start", caught.value, "INVALID_ARGUMENT")
    around(served, 13, hostile)


def test_end_twice_is_refused(served) -> None:
    def hostile(config, server, good):
        update = np.zeros((1, 2, 64), np.float32)
        infer(config, server, update, 904, True, True)
        with pytest.raises(InferenceServerException, match="must specify the START "
                           "flag") as caught:
            infer(config, server, update, 904, False, True)
        refused("hostile-end-twice", caught.value, "INVALID_ARGUMENT")
    around(served, 14, hostile)


def test_a_client_of_another_campaign_is_refused(served) -> None:
    def hostile(config, server, good):
        # another campaign's token, and the correlation ID of the sequence live here: a
        # START on it would reset the good sequence's state (its output would differ)
        another = {key: "another-campaigns-token" for key in server.headers}
        for start, end in ((True, False), (False, False), (False, True)):
            with pytest.raises(InferenceServerException, match="expecting header") as caught:
                infer(config, server, np.ones((1, 2, 64), np.float32) * 1e-21, good.corrid,
                      start, end, headers=another)
            refused("hostile-another-campaign", caught.value, "UNAVAILABLE")
    around(served, 15, hostile)


def test_ten_thousand_empty_sequences_leave_no_state(served) -> None:
    def hostile(config, server, good):
        empty = np.zeros((1, 2, 0), np.float32)
        answers: list[object] = []
        with grpcclient.InferenceServerClient(server.url) as client:
            client.start_stream(callback=lambda result, error: answers.append(error),
                                headers=server.headers)
            tensor = grpcclient.InferInput("update", [1, 2, 0], "FP32")
            tensor.set_data_from_numpy(empty)
            for corrid in range(100_000, 110_000):
                client.async_stream_infer(config.model.name, [tensor], sequence_id=corrid,
                                          sequence_start=True, sequence_end=True)
            deadline = time.monotonic() + 300
            while len(answers) < 10_000 and time.monotonic() < deadline:
                good.keep_alive()
                time.sleep(0.5)
            client.stop_stream()
        assert len(answers) == 10_000 and not any(answers)
        assert live_sequences(server) <= 1  # the good sequence
    around(served, 16, hostile)


def test_a_client_that_disconnects_mid_stream_has_its_state_dropped(served) -> None:
    def hostile(config, server, good):
        update = np.ones((1, 2, 16 * config.stride_samples), np.float32) * 1e-21
        infer(config, server, update, 907, True, False)  # START, then gone: no END
        assert live_sequences(server) == 2  # its state and the good sequence's
    config, server = served
    around(served, 17, hostile)
    # the sweep dropped it within idle_seconds (2 x sequence_idle_seconds) plus a sweep
    assert live_sequences(server) == 0
