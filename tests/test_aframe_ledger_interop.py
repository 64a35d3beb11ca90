"""aframe's own ``ledger`` code reads the ``InterferometerResponseSet`` this project writes, and
its ``inject`` puts each waveform where a campaign adds it (issue #41).

aframe's ``ledger`` is not on PyPI (the PyPI package named ``aframe`` is unrelated), so the
test runs where aframe's source is at hand: ``OFFLINE_IAAS_AFRAME_PATH`` is a ``PYTHONPATH``
holding aframe's ``ledger`` and ``utils`` packages (``libs/ledger``, ``libs/utils`` of
github.com/ML4GW/aframe) and the modules they import that this project does not install
(``pycbc``, ``mako``, ``tqdm``); docs/user-guide.md ("aframe's own reader") says how. Without it
the test is skipped. aframe's code runs in a child process; nothing of it is copied here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from offline_iaas.search.injection_file import read_injection_set
from offline_iaas.search.onthefly import OnTheFly
from offline_iaas.search.response_set import read_response_set, write_response_set
from tests.test_injections_response_set import FRAME_RATE, IFOS, START, two_binaries

AFRAME_PATH = os.environ.get("OFFLINE_IAAS_AFRAME_PATH", "")
pytestmark = pytest.mark.skipif(
    not AFRAME_PATH, reason="OFFLINE_IAAS_AFRAME_PATH (aframe's ledger and utils) not set")
SPAN_SECONDS = 32.0

ON_AFRAME_S_SIDE = """
import json, sys
import numpy as np
from ledger.injections import InterferometerResponseSet, waveform_class_factory
path, start, samples, rate, out = (sys.argv[1], float(sys.argv[2]), int(sys.argv[3]),
                                   float(sys.argv[4]), sys.argv[5])
# as aframe's inference reads its injection set (projects/infer/infer/data.py)
ResponseSet = waveform_class_factory(["H1", "L1"], InterferometerResponseSet, "ResponseSet")
irs = ResponseSet.read(path, start=start, end=start + samples / rate, shifts=[0, 0])
x = np.zeros((2, samples))
np.save(out, irs.inject(x, start))
print(json.dumps({"length": len(irs), "sample_rate": float(irs.sample_rate),
                  "num_injections": int(irs.num_injections),
                  "injection_time": irs.injection_time.tolist(),
                  "shift": np.asarray(irs.shift).tolist(),
                  "mass_1_source": np.asarray(irs.mass_1_source).tolist(),
                  "mass_2_source": np.asarray(irs.mass_2_source).tolist(),
                  "luminosity_distance": np.asarray(irs.luminosity_distance).tolist(),
                  **{k: getattr(irs, k).tolist() for k in ("ra", "dec", "psi", "phase")}}))
"""


def aframe_reads(path: Path, start: float, samples: int, out: Path) -> dict:
    """Run aframe's ``InterferometerResponseSet.read`` and ``inject`` on ``path``."""
    env = {**os.environ, "PYTHONPATH": AFRAME_PATH}
    command = [sys.executable, "-c", ON_AFRAME_S_SIDE, str(path), repr(start), str(samples),
               str(FRAME_RATE), str(out)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def campaign_adds(path: Path, start: float, samples: int) -> np.ndarray:
    """What a client adds to zeros of H1 and L1 (``OnTheFly`` with the file as its source)."""
    injections = read_injection_set(path, approximant="unrecorded", f_lower_hz=float("nan"))
    fly = OnTheFly(injections, ("H1:S", "L1:S"), START, source=read_response_set(path))
    zeros = np.zeros(samples)
    return np.stack([fly.add(f"{ifo}:S", start, FRAME_RATE, zeros) for ifo in IFOS])


def test_aframe_s_ledger_reads_our_response_set_and_injects_it_where_a_campaign_adds_it(
        tmp_path: Path) -> None:
    """Written at the frame rate by ``write_response_set`` and read as aframe's inference
    reads its set (``waveform_class_factory``, ``read`` over the data's span at zero shift):
    aframe sees the set's length, times, shifts, rate and drawn total, the binaries' source
    masses and luminosity distances (its own cosmology) and angles, and its ``inject`` into
    zeros equals what the campaign's client adds there (aframe stacks the rows as float32:
    compared to 1e-6 of the largest sample; measured 5.7e-8); into data one sample later it
    does not (1.06 of the largest sample apart)."""
    injections = two_binaries()
    path = tmp_path / "irs.hdf5"
    write_response_set(path, injections, FRAME_RATE, IFOS)
    samples = int(SPAN_SECONDS * FRAME_RATE)
    seen = aframe_reads(path, float(START), samples, tmp_path / "aframe.npy")
    assert seen["length"] == len(injections.binaries) == 2
    assert seen["sample_rate"] == FRAME_RATE and seen["num_injections"] == 5
    assert seen["injection_time"] == [b.gps_time for b in injections.binaries]
    assert np.all(np.asarray(seen["shift"]) == 0)
    for name, ours in (("mass_1_source", "mass_1"), ("mass_2_source", "mass_2"),
                       ("luminosity_distance", "luminosity_distance"), ("ra", "ra"),
                       ("dec", "dec"), ("psi", "polarization"), ("phase", "coalescence_phase")):
        np.testing.assert_allclose(seen[name], [getattr(b, ours) for b in injections.binaries],
                                   rtol=1e-6, err_msg=name)
    by_aframe = np.load(tmp_path / "aframe.npy")
    ours = campaign_adds(path, float(START), samples)
    scale = np.abs(ours).max()
    assert scale > 0 and np.abs(by_aframe - ours).max() <= 1e-6 * scale
    aframe_reads(path, START + 1 / FRAME_RATE, samples, tmp_path / "late.npy")
    late = np.load(tmp_path / "late.npy")
    assert np.abs(late - ours).max() > 0.01 * scale
