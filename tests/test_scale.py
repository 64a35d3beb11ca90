"""``benchmarks/scale.py`` (issue #20) on a small campaign, against the growth formulas
``benchmarks/SCALE.md`` states, and ``make-dag --no-check``: a plan from a cache of frame files
that are not here."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from offline_iaas.cli import main
from offline_iaas.errors import DataError, exit_code

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "scale.py"
SCALE_MD = SCRIPT.with_name("SCALE.md")


def stated_formula(name: str) -> tuple[int, int, int, int]:
    """``name = a × servers + b × clients + c × shard merges + d`` as SCALE.md states it."""
    number = r"(\d+(?:\.\d+)?)"
    match = re.search(rf"{name} = {number} × servers \+ {number} × clients \+ {number} × "
                      rf"shard merges \+ {number}", SCALE_MD.read_text())
    assert match, f"SCALE.md states no formula for {name}"
    return tuple(float(v) for v in match.groups())


def test_scale_benchmark_follows_the_formulas_scale_md_states() -> None:
    servers, clients, days = 3, 2, 30
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--servers", str(servers), "--clients", str(clients),
         "--days", str(days)],
        capture_output=True, text=True, timeout=300, check=True,
    ).stdout
    rows = dict(line.strip("| ").split(" | ", 1) for line in out.splitlines()
                if line.startswith("| ") and " | " in line)
    assert rows["layout"] == "3 servers x 2 clients"
    shards = int(rows["shard merges (merge.shard_seconds = 4096)"])
    assert shards > 100  # a month of O3-like segments at 4096 s per shard

    def stated(name: str, clients_per_server: int = clients) -> float:
        a, b, c, d = stated_formula(name)
        return a * servers + b * servers * clients_per_server + c * shards + d

    assert int(rows["DAG lines"]) == stated("DAG lines")
    assert int(rows["files written"]) == stated("files written")
    # the check can fail: one client more per server is not what was written
    assert int(rows["DAG lines"]) != stated("DAG lines", clients + 1)
    assert int(rows["files written"]) != stated("files written", clients + 1)
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
        exit_code(DataError)
    assert "does not exist" in capsys.readouterr().err
    assert not (tmp_path / "checked" / "offline.dag").exists()
    assert main(["make-dag", str(config), "--out", str(tmp_path / "planned"),
                 "--no-check"]) == 0
    assert (tmp_path / "planned" / "offline.dag").exists()

