"""Where make-dag may write a run: not inside the campaign's frame directory, whose files
``discovery`` finds recursively (a DeepClean run writes its cleaned frames under
``RUN/output/frames``: they would be found as the campaign's)."""

from __future__ import annotations

from offline_iaas.cli import main
from offline_iaas.config import load_config
from tests.error_catalogue import cli_error, documented
from tests.helpers import file_hashes


def test_make_dag_refuses_a_run_directory_inside_the_frames(small_campaign_dir,
                                                            capsys) -> None:
    ws = small_campaign_dir(export=True)
    frames = load_config(ws / "campaign.toml").data.frames
    before = file_hashes(frames)
    code = main(["make-dag", str(ws / "campaign.toml"), "--out", str(frames / "run")])
    assert code == 2
    documented("make-dag-out-inside-frames", cli_error(capsys.readouterr().err),
               {str(ws): "<ws>"}, exit_code=2)
    assert file_hashes(frames) == before and not (frames / "run").exists()
    # control: beside the frames
    assert main(["make-dag", str(ws / "campaign.toml"), "--out", str(ws / "run")]) == 0
