"""Structure rules the code keeps (issue #15): mode knowledge lives in ``modes.py``; lines are
logged through ``logging`` (``logs.py``), not through callables or by matching words."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from offline_iaas.config import load_config
from offline_iaas.modes import MODES
from tests.helpers import SMALL_CAMPAIGN

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "offline_iaas"
MODE_COMPARISON = re.compile(r"mode ==|mode in \(")
LOG_CALLABLE = re.compile(r"\blog: Callable|\"warning\" in |'warning' in ")


def test_no_mode_name_comparisons_outside_the_mode_records() -> None:
    found = [
        f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py")) if path.name != "modes.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if MODE_COMPARISON.search(line)
    ]
    assert found == []


def test_the_rule_catches_a_comparison() -> None:  # negative control
    assert MODE_COMPARISON.search('    if config.model.mode == "e2e":')
    assert MODE_COMPARISON.search('    if mode in ("deepclean", "e2e"):')


def test_lines_go_through_logging_not_callables_or_word_matching() -> None:
    found = [
        f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if LOG_CALLABLE.search(line)
    ]
    assert found == []


def test_the_logging_rule_catches_a_callable() -> None:  # negative control
    assert LOG_CALLABLE.search("    log: Callable[[str], None] = print,")
    assert LOG_CALLABLE.search('    if "warning" in line.lower():')


@pytest.mark.parametrize(("mode", "channels", "warmup_stages", "outputs"), [
    ("classifier", ["H1:STRAIN", "L1:STRAIN"], 1, ("statistic",)),
    ("bbhnet", ["H1:STRAIN", "L1:STRAIN"], 1, ("statistic",)),
    ("deepclean", ["H1:WIT_A", "L1:WIT_B"], 2, ("noise",)),
    ("e2e", ["H1:STRAIN", "L1:STRAIN", "H1:WIT_A", "L1:WIT_B"], 3, ("noise", "statistic")),
])
def test_each_mode_streams_its_channels_and_warms_up_its_stages(
    tmp_path: Path, mode: str, channels: list[str], warmup_stages: int, outputs: tuple
) -> None:
    (tmp_path / "campaign.toml").write_text(SMALL_CAMPAIGN)
    config = load_config(tmp_path / "campaign.toml", [
        f'model.mode="{mode}"', 'data.channels=["H1:STRAIN", "L1:STRAIN"]',
        'data.witnesses=["H1:WIT_A", "L1:WIT_B"]', "model.kernel_seconds=1.0",
        "model.inference_rate=4",
    ])
    assert config.mode is MODES[mode]
    assert list(config.stream_channels) == channels
    assert config.warmup_windows == warmup_stages * 3  # K/S - 1 = 3 windows per stage
    assert config.mode.outputs == outputs
