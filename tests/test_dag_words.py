"""A DAG line's words (``workflow/dag.dag_words``): ``str.split`` where it gives
``shlex.split``'s words, ``shlex`` elsewhere; make-dag's DAG is parsed without ``shlex``."""

from __future__ import annotations

import random
import shlex
import sys
from pathlib import Path

import pytest

from offline_iaas.config import config_from_dict
from offline_iaas.errors import RunError
from offline_iaas.stretches import client_shares
from offline_iaas.workflow.dag import Script, dag_words, parse_dag
from offline_iaas.workflow.dag_writer import dag_text

GOLDEN = Path(__file__).parent / "golden"
PROFILES = ("local", "ldg", "osg", "hepcloud")


def shlex_words(text: str) -> list[str] | str:
    """``shlex.split``'s words of ``text``, or ``"refused"`` where it raises."""
    try:
        return shlex.split(text, comments=False, posix=True)
    except ValueError:
        return "refused"


def words_or_refused(text: str) -> list[str] | str:
    try:
        return dag_words(text)
    except ValueError:
        return "refused"


def generated_dag(tmp_path: Path) -> str:
    """A DAG with every kind of line dag_text writes: servers, clients with a PRE script,
    shard merges with transfer, the merge, FINAL, MAXJOBS."""
    config = config_from_dict({
        "data": {"frames": "frames", "channels": ["H1:STRAIN", "L1:STRAIN"],
                 "start": 1_000_000_000, "duration": 256, "sample_rate": 256},
        "model": {"repository": "repo", "kernel_seconds": 1.0, "inference_rate": 4},
        "layout": {"servers": 3, "clients_per_server": 4},
    }, tmp_path / "c.toml")
    shares = client_shares(config)
    nodes = [share.node for share in shares]
    shards = [(f"shard{i}", nodes[i::3]) for i in range(3)]
    pre = Script("/env/bin/offline-iaas", ("prescript", "--run-dir", ".", "--node", "$JOB"),
                 75, 30)
    return dag_text(sorted({share.server for share in shares}), shares, retries=2,
                    max_parallel_clients=4, fatal_exit=2, final=True, client_pre=pre,
                    shards=shards, transfer=True, max_parallel_merges=2)


@pytest.mark.parametrize("profile", PROFILES)
def test_every_line_of_make_dags_dag_splits_into_shlex_words(profile: str) -> None:
    lines = (GOLDEN / profile / "offline.dag").read_text().splitlines()
    assert len(lines) > 50
    for line in lines:
        assert words_or_refused(line.strip()) == shlex_words(line.strip()), line


def test_every_line_of_a_generated_dag_splits_into_shlex_words(tmp_path: Path) -> None:
    lines = generated_dag(tmp_path).splitlines()
    assert {line.split(None, 1)[0] for line in lines if line} >= {
        "SERVICE", "JOB", "VARS", "RETRY", "CATEGORY", "ABORT-DAG-ON", "SCRIPT", "PARENT",
        "FINAL", "MAXJOBS", "NODE_STATUS_FILE"}
    for line in lines:
        assert words_or_refused(line.strip()) == shlex_words(line.strip()), line


TRICKY = [
    "", " ", "a", "  a  b\tc\t\t", "JOB a a.sub", "#", "# a comment", "JOB a#b c#", "a$JOB $",
    'VARS a node="a"', "VARS a x='y z'", 'a "" b', "a '' b", '"a b"c', "a\\ b", "a\\",
    "a\\\\b", "'unclosed", '"unclosed', 'a"b"c', "it's", "a\\'b", '"a\\"b"', "'a\\b'",
    "a\xa0b", "a\u3000b c", "a\x1fb", "a\x0bb", "a\x0cb", "a\x1cb", "a\x85b", "a\u2028b",
    "a\u2000b", "ä ö ü", "a\x00b", "SCRIPT PRE a /bin/pre.sh $JOB $RETRY", "a|b;c&d>e<f(g)h",
    "a*b?c[d]e{f}g~h", "=", "a=b", "a = b",
]


@pytest.mark.parametrize("text", TRICKY, ids=ascii)
def test_tricky_lines_split_into_shlex_words(text: str) -> None:
    assert words_or_refused(text) == shlex_words(text)


def test_every_white_space_character_splits_as_shlex_splits_it() -> None:
    spaces = [chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()]
    assert len(spaces) > 20
    for space in spaces:
        text = f"JOB a{space}b c"
        assert dag_words(text) == shlex_words(text), ascii(space)


def test_random_lines_split_into_shlex_words() -> None:
    alphabet = "ab#$= \t\"'\\\xa0\u3000\x1f"
    rng = random.Random(20261207)
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(12)))
        assert words_or_refused(text) == shlex_words(text), ascii(text)


def test_make_dags_dag_is_parsed_without_shlex(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Each of its lines has no quote, backslash or other white space but in VARS, which are
    not split into words: shlex, a character at a time, is never called."""
    text = generated_dag(tmp_path)
    expected = parse_dag(text)
    calls: list[str] = []
    split = shlex.split

    def counted(line: str, *args: object, **kwargs: object) -> list[str]:
        calls.append(line)
        return split(line, *args, **kwargs)

    monkeypatch.setattr(shlex, "split", counted)
    assert parse_dag(text) == expected
    assert calls == []
    # the control: a line with quotes is split by shlex, its quoted words whole
    dag = parse_dag("JOB a a.sub\nSCRIPT PRE a \"/bin/my pre.sh\" 'x y' $JOB\n")
    assert dag.nodes["a"].pre == Script("/bin/my pre.sh", ("x y", "$JOB"))
    assert calls == ["SCRIPT PRE a \"/bin/my pre.sh\" 'x y' $JOB"]


def test_a_line_shlex_refuses_is_refused_with_its_line() -> None:
    with pytest.raises(RunError, match=r"^offline.dag line 2: cannot split the line into words"):
        parse_dag("JOB a a.sub\nSCRIPT PRE a 'pre.sh\n")
