"""Shared test helpers: a small campaign and a finder for processes a test started."""

from __future__ import annotations

from pathlib import Path

SMALL_CAMPAIGN = """
[data]
frames = "frames"
channels = ["H1:GDS-CALIB_STRAIN", "L1:GDS-CALIB_STRAIN"]
start = 1262304000
duration = 64
sample_rate = 256

[synth]
file_duration = 16
frame_sample_rate = 256
injections = 1

[model]
repository = "model-repository"
kernel_seconds = 1.0
inference_rate = 4
batch_size = 8

[layout]
servers = 1
clients_per_server = 2
"""


def processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes (other than zombies) that contain ``text``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError, PermissionError, IndexError):
            continue
        if text in cmdline and state != "Z":
            found.append(f"{proc.name}: {cmdline.strip()}")
    return found
