"""Span arithmetic the test oracles share (``oracle.py``, ``sensitivity_oracle.py``): the
union of GPS spans and the training spans the search leaves out. Imports nothing of the
project."""

from __future__ import annotations


def union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """``spans`` (GPS ``[start, end)``) merged where they touch or overlap, in time order."""
    out: list[tuple[float, float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def search_training(config: dict, training: dict) -> list[tuple[float, float]]:
    """The spans of ``training`` (GPS ``[start, end]`` by network, as ``run.json`` and the
    manifest record them) of the networks the search's data went through: BBHnet's, in e2e
    each interferometer's DeepClean's too (``config``: a run's resolved config)."""
    ifos = [c.split(":")[0] for c in config["data"]["channels"]]
    names = ["bbhnet", *(f"deepclean-{ifo}" for ifo in ifos if config["model"]["mode"] == "e2e")]
    return [(float(training[n][0]), float(training[n][1])) for n in names if training.get(n)]
