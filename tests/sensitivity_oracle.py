"""The search's numbers from a run's files by their definition, sharing no code with the
merge: found and missed, the VT curve, the held-out time and the trigger counts a time-slide
campaign's ``campaign.json`` quotes, recomputed from ``campaign.h5`` (its statistic and slides
series), ``run.json`` (the training spans) and the injection set ``search.injections`` names
(a ``synth.json``: the injections and their population).

The definitions:
- the triggers, the background, its livetime and each trigger's IFAR: formed from the
  statistic and slides series (``oracle.own_triggers``), and the file's trigger table must be
  them;
- analysed time: each statistic series' span (``oracle.analysed_spans``);
- held out: analysed, outside the training spans ``run.json`` records of the networks the
  search's data went through (``search_spans.search_training``: BBHnet's, in e2e DeepClean's
  too: what a network saw is not a test of the chain);
- an injection's IFAR: the largest of the triggers within ``search.found_seconds`` of it (0
  with none); found at a threshold when it is at least the threshold;
- VT at a threshold: the population's time-volume x held-out years x found / N, N = held-out
  injections x drawn / injected; thresholds beyond the background's reach are null.
"""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np

from tests.oracle import analysed_spans, own_triggers, read_run_config, read_triggers
from tests.search_spans import search_training, union

YEAR_SECONDS = 365.25 * 86400


def trials_by_definition(population: dict, held_out: int) -> float:
    """N, the draws ``held_out`` injections stand for: held_out x drawn / injected."""
    return held_out * population["drawn"] / population["injected"]


def vt_by_definition(population: dict, held_out: int, years: float, found: int) -> float:
    """VT (Gpc^3 yr) of ``found`` of ``held_out`` injections over ``years`` of held-out time:
    the population's time-volume x years x found / N."""
    return population["time_volume_gpc3"] * years * found / trials_by_definition(
        population, held_out)


def _inside(gps: float, spans: list[tuple[float, float]]) -> bool:
    return any(a <= gps < b for a, b in spans)


def search_problems(run_dir: Path, *, shift_injections: float = 0.0, trim_seconds: float = 0.0,
                    drop_triggers: int = 0, ignore_networks: tuple[str, ...] = ()) -> list[str]:
    """What of ``campaign.json``'s BBHnet numbers differs from the definitions above.
    Controls: the injections ``shift_injections`` s later, the analysed time ``trim_seconds``
    shorter at each end, the trigger table's last ``drop_triggers`` rows left out, the
    training spans of ``ignore_networks`` not left out."""
    summary = json.loads((run_dir / "output" / "campaign.json").read_text())["bbhnet"]
    config = read_run_config(run_dir)
    search = config["search"]
    found_seconds, threshold = search["found_seconds"], search["ifar_threshold_years"]
    campaign = run_dir / "output" / "campaign.h5"
    with h5py.File(campaign, "r") as f:
        spans = analysed_spans(f, trim_seconds)
    # the triggers, their IFARs, the background and its livetime formed here from the file's
    # statistic and slides series (``oracle.own_triggers``), compared with the file's table
    own = own_triggers(run_dir, campaign)
    keep = len(own.time) - drop_triggers
    times, ifars = own.time[:keep], np.asarray(own.ifar, np.float64)[:keep]
    stored = read_triggers(campaign)
    if not (len(stored.time) == len(times) and np.allclose(stored.time, times, rtol=0, atol=1e-6)
            and np.allclose(stored.ifar, ifars, rtol=1e-9, atol=0)):
        return [f"the trigger table ({len(stored.time)} rows) is not the triggers formed from "
                f"the statistic and slides series ({len(times)})"]
    injection_set = json.loads(Path(search["injections"]).read_text())
    population = injection_set["population"]
    recorded = json.loads((run_dir / "run.json").read_text()).get("training") or {}
    training = union(search_training(config, {name: span for name, span in recorded.items()
                                              if name not in ignore_networks}))

    problems = []
    counts = {"triggers": len(times), "background_triggers": len(own.background["time"]),
              "background_livetime_seconds": own.livetime_seconds,
              "loudest_ifar_years": float(ifars.max(initial=0.0))}
    for key, value in counts.items():
        if not np.isclose(summary[key], value, rtol=1e-9, atol=0):
            problems.append(f"{key}: campaign {summary[key]}, here {value}")

    snr = {i["gps_time"] + shift_injections: i["network_snr"]
           for i in injection_set["injections"]}
    listed = sorted(snr)
    analysed = [t for t in listed if _inside(t, spans)]
    held_out = [t for t in analysed if not _inside(t, training)]

    def ifar_of(gps: float) -> float:
        near = np.abs(times - gps) <= found_seconds
        return float(ifars[near].max()) if near.any() else 0.0

    place = {"listed": len(listed), "held_out": len(held_out),
             "in_training": len(analysed) - len(held_out),
             "outside_analysed": len(listed) - len(analysed)}
    if summary["injection_counts"] != place:
        problems.append(f"injections: campaign {summary['injection_counts']}, here {place}")
    rows = sorted(summary["injections"], key=lambda row: row["gps_time"])
    wanted = [(t, snr[t], _inside(t, training), ifar_of(t)) for t in analysed]
    got = [(row["gps_time"], row["network_snr"], row["in_training"], row["ifar_years"])
           for row in rows]
    if len(got) != len(wanted) or any(
            not np.allclose(a[:2], b[:2], rtol=1e-12, atol=0) or a[2] != b[2]
            or not np.isclose(a[3], b[3], rtol=1e-12, atol=0)
            for a, b in zip(got, wanted, strict=True)):
        problems.append("the injections' rows (time, SNR, in training, IFAR) differ from the "
                        "injection set's and the triggers'")
    found = sum(ifar_of(t) >= threshold for t in held_out)
    if (summary["found"], summary["missed"]) != (found, len(held_out) - found) or any(
            row["found"] != (row["ifar_years"] >= threshold) for row in rows):
        problems.append(f"found/missed at {threshold} yr: campaign {summary['found']}/"
                        f"{summary['missed']}, here {found}/{len(held_out) - found}")

    analysed_seconds = sum(b - a for a, b in spans)
    held_out_seconds = analysed_seconds - sum(max(0.0, min(b, d) - max(a, c))
                                              for a, b in spans for c, d in training)
    if not (np.isclose(held_out_seconds, summary["held_out_seconds"], rtol=0, atol=1e-6)
            and np.isclose(analysed_seconds, summary["analysed_seconds"], rtol=0, atol=1e-6)):
        problems.append(f"held-out time {summary['held_out_seconds']} s of "
                        f"{summary['analysed_seconds']} s analysed, here {held_out_seconds} s "
                        f"of {analysed_seconds} s (training spans {training})")
    reach = own.livetime_seconds / YEAR_SECONDS
    for point in summary["sensitivity"]["curve"]:
        at = point["ifar_threshold_years"]
        if at > reach:
            if point["vt_gpc3_years"] is not None or point["found"] is not None:
                problems.append(f"IFAR {at:.3g} yr beyond the background: not null")
            continue
        found_at = sum(ifar_of(t) >= at for t in held_out)
        vt = vt_by_definition(population, len(held_out), held_out_seconds / YEAR_SECONDS,
                              found_at)
        if (point["found"], point["injections"]) != (found_at, len(held_out)) or not np.isclose(
                point["vt_gpc3_years"], vt, rtol=1e-9, atol=0):
            problems.append(f"IFAR {at:.3g} yr: campaign {point['found']}/"
                            f"{point['injections']} VT {point['vt_gpc3_years']:.4g}, here "
                            f"{found_at}/{len(held_out)} VT {vt:.4g}")
    return problems
