"""What a node's process used of its machine, for the records it writes (part sidecars, merge
summaries) and the sizing that reads them."""

from __future__ import annotations

import resource


def peak_rss_mb() -> float:
    """This process's peak resident memory in MiB (``ru_maxrss``: KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
