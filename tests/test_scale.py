"""``benchmarks/scale.py`` (issue #20) on a small campaign, and ``make-dag --no-check``: a plan
from a cache of frame files that are not here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from offline_iaas.cli import main
from offline_iaas.errors import DataError

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "scale.py"


def test_scale_benchmark_plans_a_month_from_frames_that_are_not_here() -> None:
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--servers", "3", "--clients", "2", "--days", "30"],
        capture_output=True, text=True, timeout=300, check=True,
    ).stdout
    rows = dict(line.strip("| ").split(" | ", 1) for line in out.splitlines()
                if line.startswith("| ") and " | " in line)
    assert rows["layout"] == "3 servers x 2 clients"
    assert int(rows["DAG lines"]) > 6 and int(rows["files written"]) >= 6 + 6
    assert rows["status says"].startswith("data seconds done:") and "(50%)" in rows[
        "status says"]


def test_make_dag_without_no_check_opens_the_files(tmp_path: Path, capsys) -> None:
    cache = tmp_path / "frames.lcf"
    cache.write_text("".join(
        f"{o} {o}1_X {g} 64 file://localhost/nowhere/{o}-{o}1_X-{g}-64.gwf\n"
        for o in "HL" for g in range(1_000_000_000, 1_000_000_512, 64)))
    config = tmp_path / "c.toml"
    config.write_text(f"""
[data]
frames = "{cache}"
channels = ["H1:STRAIN", "L1:STRAIN"]
start = 1000000000
duration = 512
sample_rate = 256
[model]
repository = "{tmp_path / 'repo'}"
kernel_seconds = 1.0
inference_rate = 4
""")
    assert main(["make-dag", str(config), "--out", str(tmp_path / "checked")]) == \
        DataError.exit_code
    assert "does not exist" in capsys.readouterr().err
    assert not (tmp_path / "checked" / "offline.dag").exists()
    assert main(["make-dag", str(config), "--out", str(tmp_path / "planned"),
                 "--no-check"]) == 0
    assert (tmp_path / "planned" / "offline.dag").exists()

