"""What `kuberl run` shows: a live bar on a terminal, plain lines in a pipe, checkpoints only with -v,
the checkpoint volume's paths where they lie here."""

from __future__ import annotations

import io

from kuberl.core.contract import training_return_label
from kuberl.local.console import Console, Output


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


PROGRESS = "[rank 0] timesteps 206762  steps/s 17,045  return 500.0  eval 500.0\n"
CHECKPOINT = "[rank 0] checkpoint /checkpoints/job-1234/ckpt-0000000140.pt (timesteps 206762)\n"
RESUMED = "[rank 0] resuming from /checkpoints/job-1234/ckpt-0000000140.pt (timesteps 206762)\n"


def test_a_terminal_gets_one_live_bar_with_percent_rate_eta_return_and_eval(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    screen = Terminal()
    console = Console(screen, 3_000_000, str(tmp_path / "runs" / "job" / "checkpoints"))
    assert console.live
    console.write(PROGRESS + CHECKPOINT + RESUMED + "[rank 1] hello\n")
    console.progress(1_500_000, 123.4, None)
    console.progress(1_600_000, 130.0, 200.0)
    console.close()
    out = screen.getvalue()
    assert "timesteps 206762  steps/s" not in out, "the bar shows progress; its line is not printed"
    assert "checkpoint " not in out, "checkpoints only with -v"
    assert "[rank 0] resuming from runs/job/checkpoints/job-1234/ckpt-0000000140.pt (timesteps 206762)" in out
    assert "[rank 1] hello" in out
    assert "53%" in out and "return 130.0  eval 200.0" in out and "step/s" in out and "<" in out  # percent, rate, ETA


def test_the_bar_names_the_training_return_as_the_progress_line_does():
    """SAC's and TD3's training episodes explore (contract.training_return_label): the bar says so, as rank 0's line."""
    screen = Terminal()
    console = Console(screen, 40_000, return_label=training_return_label("sac"))
    console.progress(3_788, -1260.4, -188.1)
    console.close()
    assert "exploring return -1260.4  eval -188.1" in screen.getvalue()


def test_a_pipe_gets_plain_lines_and_verbose_adds_checkpoints(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    pipe = io.StringIO()
    console = Console(pipe, 3_000_000, str(tmp_path / "runs" / "job" / "checkpoints"), verbose=True)
    assert not console.live
    console.write(PROGRESS + CHECKPOINT)
    console.progress(1_500_000, 1.0, 2.0)
    console.close()
    assert pipe.getvalue() == (PROGRESS + "[rank 0] checkpoint runs/job/checkpoints/job-1234/ckpt-0000000140.pt (timesteps 206762)\n")


def test_a_custom_trainer_without_a_budget_gets_no_bar():
    assert not Console(Terminal(), None).live


class ClosedPipe(Terminal):
    """A reader that went away after the first line (`kuberl run job.yaml | head -1`)."""

    def write(self, text: str) -> int:
        if self.getvalue():
            raise BrokenPipeError(32, "Broken pipe")
        return super().write(text)


def test_a_closed_pipe_sends_the_rest_to_stderr_and_says_the_reader_is_gone():
    pipe, stderr = ClosedPipe(), io.StringIO()
    output = Output(pipe, stderr)
    console = Console(output, 1000, live=False)
    assert output.isatty() and not console.reader_gone
    console.line("[kuberl] first")
    console.write("[rank 0] second\n")  # raised BrokenPipeError out of `kuberl run`, every rank killed unsaved
    console.line("[kuberl] third")
    assert pipe.getvalue() == "[kuberl] first\n" and stderr.getvalue() == "[rank 0] second\n[kuberl] third\n"
    assert console.reader_gone and not output.isatty()
    closed_stderr = ClosedPipe()
    closed_stderr.write("already read\n")
    both = Output(ClosedPipe(), closed_stderr)  # `kuberl run job.yaml 2>&1 | head -2`: stderr is the same closed pipe
    for line in ("first\n", "second\n", "third\n"):
        both.write(line)
        both.flush()
    assert both.reader_gone and both.stream.getvalue() == "first\n" and closed_stderr.getvalue() == "already read\n"


def test_a_checkpoint_path_through_rank_0s_pod_root_is_shown_where_it_lies_here(tmp_path, monkeypatch):
    """checkpoint.load_newest's "skipping checkpoint" names the path the trainer opened, under its pod's root
    here (runs/job/pods/job-0/root/checkpoints/…, absolute), where the other lines say runs/job/checkpoints/…"""
    monkeypatch.chdir(tmp_path)
    pipe = io.StringIO()
    console = Console(pipe, 3_000_000, str(tmp_path / "runs" / "job" / "checkpoints"))
    rooted = tmp_path / "runs" / "job" / "pods" / "job-0" / "root" / "checkpoints" / "job-1234" / "ckpt-0000000056.pt"
    console.write(f"[rank 0] skipping checkpoint {rooted}: trained on Acrobot-v1 with ppo\n")
    console.close()
    assert pipe.getvalue() == "[rank 0] skipping checkpoint runs/job/checkpoints/job-1234/ckpt-0000000056.pt: trained on Acrobot-v1 with ppo\n"
