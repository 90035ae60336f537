"""What a finished `kuberl run` prints, from a real run: each thing said once."""

import subprocess
import sys

import yaml

from tests.support.jobs import make_job
from tests.support.ports import free_port


def test_rank_zeros_success_is_said_once_by_rank_0_then_the_closing_line(tmp_path):
    """The README's `make train` said "Succeeded: eval return 492.1 >= 475.0 at timesteps 41191; model …" twice in a
    row, as rank 0's last line and again as `[kuberl] RankZeroSucceeded: Succeeded: …`, before the closing line."""
    job = make_job("once").workers(1).with_spec(totalTimesteps=512, rendezvous={"port": free_port()}).obj()
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    done = subprocess.run([sys.executable, "-m", "kuberl.cli", "run", "job.yaml", "--dir", "runs"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    said = [line for line in lines if "Succeeded: budget of 512 timesteps spent" in line]
    assert [line.split("]")[0] + "]" for line in said] == ["[rank 0]"], said
    assert lines[-1].startswith("[kuberl] once succeeded: ")
