"""The bench's targets, judged fairly: the service's typical repeat against the comparator's best.

A measurement on a shared 2-core machine is noisy: within one run the DeepClean limit at batch
32 ranged from 36 to 62 data-s/s between repeats. A target judged against the limit measured
beside the service, or with the service's best repeat, can be met by noise. So each target is
judged with

    service  = the median of the service's repeats at the workload's default point
    opponent = the best repeat of the limit (or naive path) measured at the same batch size and
               number of instances anywhere in the run (every client count)

per wall second and per CPU second (data seconds per CPU second of the client and server
processes, or the limit's workers), and both must meet the target. The spread of the repeats
(least to most) is printed beside each. Where a target is missed, ``missed_lines`` says by how
much, where the service's CPU goes beyond the network's, and what would meet it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from offline_iaas.bench.results import Measurement
from offline_iaas.bench.workloads import workload

BYTES_TARGET_FACTOR = 1.1
STREAMED_OVER_WHOLE = 3.0
"""Issue #42: the streamed service against the same weights served whole-window."""
TARGETS: dict[str, dict[str, float]] = {
    "deepclean": {"service/limit": 0.85, "service/naive": 1.5,
                  "service/whole-window": STREAMED_OVER_WHOLE},
    "o3-deepclean": {"service/limit": 0.85, "service/whole-window": STREAMED_OVER_WHOLE},
    "bbhnet": {"service/limit": 0.85, "service/whole-window": STREAMED_OVER_WHOLE},
    "aframe": {"service/limit": 0.85, "service/whole-window": STREAMED_OVER_WHOLE},
    "e2e": {"service/limit": 0.85, "service/whole-window": STREAMED_OVER_WHOLE},
}
"""Issue #14's targets (2 cores, no GPU) and issue #42's, judged at each workload's default
point; every workload's service also sends at most ``BYTES_TARGET_FACTOR`` x its raw channel
bytes. A workload that is not streamed yet has no whole-window path: its service is that
path, and the target is reported missed."""


@dataclass(frozen=True)
class Spread:
    """A path's repeats at one place: data seconds per wall second and per CPU second."""

    rates: tuple[float, ...]
    per_cpu: tuple[float, ...]

    @classmethod
    def of(cls, measurements: list[Measurement]) -> Spread:
        return cls(tuple(m.data_seconds_per_second for m in measurements),
                   tuple(m.data_seconds_per_cpu_second for m in measurements))

    @property
    def median(self) -> float:
        return statistics.median(self.rates) if self.rates else float("nan")

    @property
    def median_per_cpu(self) -> float:
        return statistics.median(self.per_cpu) if self.per_cpu else float("nan")

    @property
    def best(self) -> float:
        return max(self.rates, default=float("nan"))

    @property
    def best_per_cpu(self) -> float:
        return max(self.per_cpu, default=float("nan"))

    def text(self) -> str:
        """``median [least-most] (n)`` per wall second."""
        if not self.rates:
            return "—"
        return (f"{self.median:.1f} [{min(self.rates):.1f}–{max(self.rates):.1f}] "
                f"({len(self.rates)})")


def repeats_of(measurements: list[Measurement], path: str, name: str, batch_size: int,
               instances: int, clients: int | None = None) -> list[Measurement]:
    """``path``'s measurements of workload ``name`` at a batch size and number of instances
    (at every client count unless ``clients`` is given)."""
    return [m for m in measurements
            if (m.path, m.workload, m.batch_size, m.threads) == (path, name, batch_size, instances)
            and (clients is None or m.clients == clients)]


@dataclass(frozen=True)
class TargetCheck:
    """One target judged at one point: the service's median against the opponent's best."""

    workload: str
    name: str
    value: float
    """Per wall second (the bytes target: its ratio)."""
    cpu_value: float
    """Per CPU second (NaN where it does not apply)."""
    threshold: float
    lower_is_better: bool = False
    service: Spread | None = None
    opponent: Spread | None = None
    """The opponent's repeats at the batch size (every client count)."""

    @property
    def met(self) -> bool:
        """Met per wall second and per CPU second where that applies; NaN is not met."""
        if self.lower_is_better:
            return self.value <= self.threshold
        return self.value >= self.threshold and (
            self.cpu_value != self.cpu_value or self.cpu_value >= self.threshold)


def judge(measurements: list[Measurement], name: str, batch_size: int, clients: int,
          instances: int) -> list[TargetCheck]:
    """The targets of workload ``name`` at the point ``(batch_size, clients, instances)``
    (none without a service measurement there)."""
    service = repeats_of(measurements, "service", name, batch_size, instances, clients)
    if not service:
        return []
    mine = Spread.of(service)
    checks = []
    for target, threshold in TARGETS.get(name, {}).items():
        opponent = Spread.of(repeats_of(measurements, target.split("/")[1], name, batch_size,
                                        instances))
        checks.append(TargetCheck(
            name, target, mine.median / opponent.best,
            mine.median_per_cpu / opponent.best_per_cpu, threshold,
            service=mine, opponent=opponent))
    sent = statistics.median(m.bytes_sent_per_data_second for m in service)
    checks.append(TargetCheck(
        name, "sent bytes / (channels x rate x 4 B)",
        sent / workload(name).input_bytes_per_data_second, float("nan"),
        BYTES_TARGET_FACTOR, lower_is_better=True, service=mine))
    return checks


def missed_lines(measurements: list[Measurement], check: TargetCheck, batch_size: int,
                 instances: int, met_elsewhere: list[str]) -> list[str]:
    """Why a missed ratio target is missed and what would meet it, from the numbers the
    target was judged with: the service's median repeat against the opponent's best."""
    opponent_path = check.name.split("/")[1]
    if opponent_path == "whole-window" and check.opponent is not None \
            and not check.opponent.rates:
        return [f"- **{check.workload} {check.name} is missed**: {check.workload}'s networks are "
                "not served streamed yet (issue #42), so its service is the whole-window path "
                "itself (ratio 1)."]
    if (check.met or check.lower_is_better or check.service is None
            or check.opponent is None or not check.cpu_value > 0):
        return []
    opponent_ms = 1e3 / check.opponent.best_per_cpu
    service_ms = opponent_ms / check.cpu_value  # the median repeat's, as judged
    allowed_ms = opponent_ms / check.threshold
    median = min(repeats_of(measurements, "service", check.workload, batch_size, instances),
                 key=lambda m: abs(m.data_seconds_per_cpu_second
                                   - check.service.median_per_cpu))
    client_ms = 1e3 * median.client_cpu_seconds / median.data_seconds
    server_ms = 1e3 * median.server_cpu_seconds / median.data_seconds
    where = (f"; met at {', '.join(met_elsewhere)} of the sweep" if met_elsewhere else
             "; met at no point of the sweep")
    if service_ms > allowed_ms:
        cost = (f"CPU costs decide it: the service's median repeat spends {service_ms:.2f} ms "
                f"of CPU per data second (clients {client_ms:.2f}, tritonserver and its stubs "
                f"{server_ms:.2f}) where the {opponent_path}'s best spends {opponent_ms:.2f}. "
                f"What would meet it: {allowed_ms:.2f} ms ({opponent_ms:.2f} / "
                f"{check.threshold:g}), {service_ms - allowed_ms:.2f} ms less per data second "
                "of what the service adds to the networks' compute (gRPC and protobuf, the "
                "sequence batcher, the python backend's copies, the clients' reading and "
                "framing), or cores the clients do not share with the server (on a cluster "
                "they run on other machines).")
    else:
        cost = ("the service's CPU per data second is within the target per CPU second "
                f"({service_ms:.2f} ms against at most {allowed_ms:.2f}), so the wall-clock "
                "miss is the cores the service got: its clients share two cores with the "
                "server here. What would meet it: cores the clients do not share with the "
                "server (on a cluster they run on other machines).")
    return [
        f"- **{check.workload} {check.name} is missed** ({check.value:.2f} per wall second, "
        f"{check.cpu_value:.2f} per CPU second, target {check.threshold:g}){where}. Why: "
        + cost
    ]
