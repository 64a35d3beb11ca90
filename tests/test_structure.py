"""Structure rules the code keeps (issue #15): mode knowledge lives in ``modes.py``; lines are
logged through ``logging`` (``logs.py``), not through callables or by matching words."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import numpy as np
import pytest

from offline_iaas.config import load_config
from offline_iaas.mode_packages import find_mode
from offline_iaas.modes import Outputs
from tests.helpers import SMALL_CAMPAIGN

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "offline_iaas"
MODE_COMPARISON = re.compile(r"mode ==|mode in \(")
LOG_CALLABLE = re.compile(r"\blog: Callable|\"warning\" in |'warning' in ")


def lines_matching(pattern: re.Pattern[str], skip: tuple[str, ...] = ()) -> list[str]:
    """``path:line: text`` of each source line ``pattern`` finds (files named in ``skip``
    left out)."""
    return [f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}"
            for path in sorted(PACKAGE.rglob("*.py")) if path.name not in skip
            for number, line in enumerate(path.read_text().splitlines(), 1)
            if pattern.search(line)]


def test_no_mode_name_comparisons_outside_the_mode_records() -> None:
    assert lines_matching(MODE_COMPARISON, skip=("modes.py",)) == []


def test_the_rule_catches_a_comparison() -> None:  # negative control
    assert MODE_COMPARISON.search('    if config.model.mode == "e2e":')
    assert MODE_COMPARISON.search('    if mode in ("deepclean", "e2e"):')


def test_lines_go_through_logging_not_callables_or_word_matching() -> None:
    assert lines_matching(LOG_CALLABLE) == []


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
    assert config.mode is importlib.import_module(f"offline_iaas.science.{mode}").MODE
    assert list(config.stream_channels) == channels
    assert config.warmup_windows == warmup_stages * 3  # K/S - 1 = 3 windows per stage
    assert config.mode.outputs == outputs == config.outputs.names


def test_outputs_are_named_and_shaped_by_the_mode_record() -> None:
    bbhnet, deepclean = find_mode("bbhnet"), find_mode("deepclean")
    assert bbhnet.output_names(canary=False, has_slides=True) == ("statistic", "background")
    assert deepclean.output_names(canary=True, has_slides=False) == ("noise", "noise_canary")
    layout = Outputs(("noise", "statistic", "background"), ifos=2, stride_samples=4,
                     slides=3)
    assert [layout.row_shape(n) for n in layout.names] == [(2, 4), (), (3,)]
    noise = np.arange(2 * 3 * 4).reshape(2, 12)  # [ifos, n S], n = 3 windows
    rows = layout.rows("noise", noise)
    assert rows.shape == (3, 2, 4) and rows[1, 1].tolist() == noise[1, 4:8].tolist()
    assert rows[1, 1].tolist() != noise[1, 5:9].tolist()  # negative control: one sample off
    assert layout.rows("background", np.arange(6)).tolist() == [[0, 1, 2], [3, 4, 5]]
    assert layout.rows("statistic", np.arange(3)).tolist() == [0, 1, 2]


# ---- the run directory travels as a RunDir; files stay short (issue #31) --------------------
RUN_DIR_JOIN = re.compile(r"\b(run_dir|run\.path|paths\.path)\s*/|\.(logs|scratch)\s*/")
"""A path joined onto a run directory, or onto its folders of files named per node, by hand:
``RunDir`` names every file of it."""
RUN_DIR_MADE_IN = {"cli.py", "demo.py", "workflow/profiles.py", "workflow/examples.py",
                   "workflow/dag_writer.py",
                   "bench/sweep.py", "bench/regression.py", "bench/timeslides.py",
                   "bench/foreground.py", "rundir.py"}
"""Where a ``RunDir`` is made from a path: where the run directory is named (the command line,
the demo's work directory, the bench's server directories, the example run of the rendered
submit files) and the submit files' and the DAG's relative paths. Everywhere else one is passed
in."""
MAX_LINES = 600


def _sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_no_path_is_joined_onto_a_run_directory_outside_rundir() -> None:
    found = [
        f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}"
        for path in _sources() if path.name != "rundir.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if RUN_DIR_JOIN.search(line)
    ]
    assert found == []


def test_functions_take_a_run_dir_not_a_path_they_wrap() -> None:
    made = [f"{path.relative_to(PACKAGE)}:{number}" for path in _sources()
            if str(path.relative_to(PACKAGE)) not in RUN_DIR_MADE_IN
            for number, line in enumerate(path.read_text().splitlines(), 1)
            if "RunDir(" in line]
    assert made == []
    parameters = [f"{path.relative_to(PACKAGE)}:{line}" for path in _sources()
                  for line in run_dir_parameters(path.read_text())]
    assert parameters == []


def run_dir_parameters(source: str) -> list[str]:
    """``line: function`` of each function with a parameter named ``run_dir``."""
    import ast

    return [f"{node.lineno}: {node.name}" for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and any(a.arg == "run_dir" for a in [*node.args.args, *node.args.kwonlyargs])]


def test_the_run_directory_rules_catch_a_join_and_a_path_parameter() -> None:  # negative control
    assert RUN_DIR_JOIN.search('    target = run_dir / "model-repository"')
    assert RUN_DIR_JOIN.search('    for stale in (run.path / "output").glob("*"):')
    assert not RUN_DIR_JOIN.search("    path = run.output_shards / name")
    assert RUN_DIR_JOIN.search('    return run.logs / f"{node}-tritonserver.log"')
    assert RUN_DIR_JOIN.search('    sandbox = self.paths.scratch / f"{node}.{attempt}"')
    assert run_dir_parameters("def merge(run_dir: Path) -> None:\n    pass\n") == ["1: merge"]
    assert run_dir_parameters("def merge(run: RunDir) -> None:\n    pass\n") == []


def long_files(paths: list[Path]) -> list[str]:
    """``path: lines`` of each file over ``MAX_LINES`` lines."""
    return [f"{path}: {count}" for path in paths
            if (count := len(path.read_text().splitlines())) > MAX_LINES]


def test_no_file_is_over_600_lines() -> None:
    root = PACKAGE.parents[1]
    assert long_files(sorted([*root.glob("src/**/*.py"), *root.glob("tests/**/*.py"),
                              *root.glob("benchmarks/**/*.py")])) == []


def test_the_length_rule_catches_a_long_file(tmp_path: Path) -> None:  # negative control
    (tmp_path / "a.py").write_text("x = 1\n" * MAX_LINES)
    (tmp_path / "b.py").write_text("x = 1\n" * (MAX_LINES + 1))
    assert long_files([tmp_path / "a.py", tmp_path / "b.py"]) == [f"{tmp_path / 'b.py'}: 601"]


# ---- every test checks something (issue #38) ---------------------------------------------------
CHECKS = {"raises", "warns", "fail", "deprecated_call"}
"""``pytest.raises``, ``pytest.warns``, ``pytest.fail``, ...: calls that check; so does any call
whose name starts with ``assert`` (``np.testing.assert_allclose``) and an ``assert``."""


def _called(call: ast.Call) -> str:
    return getattr(call.func, "id", getattr(call.func, "attr", ""))


def unchecked_tests(sources: dict[str, str]) -> list[str]:
    """``file:line: name`` of each test function with no ``assert``, no checking call
    (``CHECKS``, ``assert*``) and no call of a helper that checks (helpers are followed
    through every module given, by name)."""
    trees = {name: ast.parse(text) for name, text in sources.items()}
    functions: dict[str, list[ast.AST]] = {}
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                functions.setdefault(node.name, []).append(node)

    def checks_itself(node: ast.AST) -> bool:
        return any(isinstance(n, ast.Assert) or isinstance(n, ast.Call) and (
            _called(n) in CHECKS or _called(n).startswith("assert")) for n in ast.walk(node))

    checking = {name for name, nodes in functions.items() if any(map(checks_itself, nodes))}
    grown = True
    while grown:  # helpers calling helpers that check
        before = len(checking)
        checking |= {name for name, nodes in functions.items() if any(
            isinstance(n, ast.Call) and _called(n) in checking
            for node in nodes for n in ast.walk(node))}
        grown = len(checking) > before
    return [f"{name}:{node.lineno}: {node.name}" for name, tree in trees.items()
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.name.startswith("test") and node.name not in checking]


def test_every_test_checks_something() -> None:
    tests = PACKAGE.parents[1] / "tests"
    sources = {str(p.relative_to(tests)): p.read_text() for p in sorted(tests.rglob("*.py"))}
    assert unchecked_tests(sources) == []


def test_the_check_rule_catches_a_test_without_a_check() -> None:  # negative control
    helpers = "def same(a, b):\n    assert a == b\n\ndef quiet(a):\n    return a\n"
    tests = ("def test_a():\n    same(1, 1)\n\ndef test_b():\n    quiet(1)\n\n"
             "def test_c():\n    with pytest.raises(ValueError):\n        int('x')\n\n"
             "def test_d():\n    np.testing.assert_array_equal(1, 1)\n")
    assert unchecked_tests({"h.py": helpers, "t.py": tests}) == ["t.py:4: test_b"]


# ---- functions take the section they read (issue #43) ------------------------------------------

WHOLE_CONFIG_CEILING = 0
"""Functions outside ``config.py``, ``config_checks.py`` and a mode package's ``settings.py``
(which handle the config as a whole) that take a ``CampaignConfig`` and read at most two of
its attributes, never passing it on whole: they take those sections or numbers instead (none
is left; a new one fails the test)."""


def whole_config_readers(source: str) -> list[str]:
    """``line: function(parameter)`` of each function taking a ``CampaignConfig`` of which
    it reads at most two attributes and which it never passes on whole."""
    tree = ast.parse(source)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for arg in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]:
            if arg.annotation is None or "CampaignConfig" not in ast.unparse(arg.annotation):
                continue
            uses = [n for n in ast.walk(node) if isinstance(n, ast.Name) and n.id == arg.arg]
            read = {parents[n].attr for n in uses
                    if isinstance(parents[n], ast.Attribute) and parents[n].value is n}
            whole = [n for n in uses
                     if not (isinstance(parents[n], ast.Attribute) and parents[n].value is n)]
            if len(read) <= 2 and not whole:
                found.append(f"{node.lineno}: {node.name}({arg.arg})")
    return found


def test_few_functions_take_the_whole_config_to_read_a_section() -> None:
    found = [f"{path.relative_to(PACKAGE)}:{line}" for path in _sources()
             if path.name not in ("config.py", "config_checks.py", "settings.py")
             for line in whole_config_readers(path.read_text())]
    assert len(found) <= WHOLE_CONFIG_CEILING, "\n".join(found)


def test_the_section_rule_catches_a_whole_config_read_for_one_section() -> None:  # control
    narrow = "def f(config: CampaignConfig) -> str:\n    return config.data.frames\n"
    passes = "def f(config: CampaignConfig) -> str:\n    return g(config, config.data)\n"
    wide = ("def f(config: CampaignConfig) -> str:\n"
            "    return config.data, config.model, config.merge\n")
    assert whole_config_readers(narrow) == ["1: f(config)"]
    assert whole_config_readers(passes) == whole_config_readers(wide) == []
