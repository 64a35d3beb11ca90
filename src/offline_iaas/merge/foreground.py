"""The foreground (``search.inject``): the statistic of the streams with the injections added
(``search/foreground.py``), as a table of ``time`` and ``statistic`` that found/missed reads;
where e2e searches the raw strain too, ``statistic_raw``, the same rows' raw-strain statistic.

The clients' parts hold each foreground piece's rows (``foreground/statistic/<j>``, warm-up
included); the reference produces the same rows in-process. The kept rows are stamped as the
background's (``stretches.statistic_row_gps``): row ``r`` of a stretch at the end of window ``r``
less the averaging delay. The merge (or the index over shard merges) reads them from every part and
writes the table to ``output/campaign.h5`` as ``foreground``.
"""

from __future__ import annotations

import h5py
import numpy as np

from offline_iaas.client.part import FOREGROUND
from offline_iaas.config import CampaignConfig
from offline_iaas.geometry import StreamGeometry
from offline_iaas.modes import Outputs
from offline_iaas.records import ClientShare, Piece
from offline_iaas.rundir import RunDir
from offline_iaas.search.foreground import injection_times, share_foreground
from offline_iaas.stretches import statistic_row_gps

FOREGROUND_COLUMNS = [("time", "f8"), ("statistic", "f4")]


def foreground_columns(outputs: Outputs) -> list[tuple[str, str]]:
    """The foreground table's columns: ``time``, then each statistic."""
    return [("time", "f8"), *((name, "f4") for name in outputs.statistics)]


def foreground_rows(geometry: StreamGeometry, outputs: Outputs, piece: Piece,
                    statistics: dict[str, np.ndarray]) -> np.ndarray:
    """The kept rows of one foreground piece's ``statistics`` (``foreground_statistics``:
    its stream's rows, warm-up included) with their GPS times."""
    skip = piece.output_start - piece.first_window
    kept = {name: np.asarray(values[skip:], dtype=np.float32)
            for name, values in statistics.items()}
    count = len(kept["statistic"])
    rows = np.arange(piece.output_start, piece.output_start + count)
    table = np.zeros(count, dtype=foreground_columns(outputs))
    table["time"] = statistic_row_gps(geometry, piece.stretch_gps_start, rows)
    for name, values in kept.items():
        table[name] = values.reshape(count, -1)[:, 0]
    return table


def read_foreground(run: RunDir, config: CampaignConfig, shares: list[ClientShare]
                    ) -> np.ndarray | None:
    """Every part's foreground, in time order (None unless ``search.inject``)."""
    if not config.search.inject:
        return None
    times = injection_times(config.search)
    found = [np.zeros(0, foreground_columns(config.outputs))]
    names = config.outputs.statistics
    for share in shares:
        pieces = share_foreground(config.geometry, config.search, share, times)
        if not pieces:
            continue
        with h5py.File(run.part(share.node)[0], "r") as f:
            found += [foreground_rows(config.geometry, config.outputs, p,
                                      {n: f[f"{FOREGROUND}/{n}/{j}"][()] for n in names})
                      for j, p in enumerate(pieces)]
    table = np.concatenate(found)
    return table[np.argsort(table["time"], kind="stable")]
