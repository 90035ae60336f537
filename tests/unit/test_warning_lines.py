"""Python warnings a new user meets, each as one plain line: gymnasium's colour codes reached `kuberl run` as literal
`\\x1b[33m`, and each rank (and `kuberl validate`) printed Python's two lines, the second `  logger.deprecation(`."""

import io
import warnings

import yaml
from kuberl import cli
from kuberl.core.safetext import without_colours
from kuberl_trainer import startup

from tests.support.jobs import make_job

COLOURED = "\x1b[33mWARN: The environment CartPole-v0 is out of date. You should consider upgrading to version `v1`.\x1b[0m"


def test_colours_are_taken_out_and_nothing_else():
    assert without_colours(COLOURED) == ("WARN: The environment CartPole-v0 is out of date. You should consider upgrading"
                                         " to version `v1`.")
    assert without_colours("a\x1b[1;31mb\x1b[0m\x1b]8;;x\x07") == "ab\x1b]8;;x\x07"  # a link is escape()'s to show


def test_a_pods_warning_is_one_line_without_colours_naming_where_it_was_raised(monkeypatch):
    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)  # restored after the test
    startup.one_line_warnings()
    stream = io.StringIO()
    warnings.showwarning(COLOURED, DeprecationWarning, "/venv/gymnasium/envs/registration.py", 511, file=stream)
    assert stream.getvalue() == ("DeprecationWarning: WARN: The environment CartPole-v0 is out of date. You should"
                                 " consider upgrading to version `v1`. (registration.py:511)\n")


def test_validate_says_gymnasiums_warning_as_one_of_its_own(tmp_path, capsys):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(make_job("j").minimal().env("CartPole-v0").replace(success={"targetReturn": 195}).obj()))
    assert cli.main(["validate", str(path)]) == 0
    err = capsys.readouterr().err
    assert ("j: warning: spec.env.id: gymnasium says: The environment CartPole-v0 is out of date. You should consider"
            " upgrading to version `v1`.\n") in err
    assert "logger.deprecation(" not in err and "\x1b" not in err, err
