"""``closedloop dashboard``: argument surface, refusal of bad targets, the streamlit command."""

from __future__ import annotations

from closedloop.cli import build_parser
from dashboards import cli


def test_parser_surface(tmp_path):
    args = build_parser().parse_args(["dashboard", str(tmp_path)])
    assert (args.targets, args.port, args.host) == ([str(tmp_path)], 8501, "127.0.0.1")
    args = build_parser().parse_args(["dashboard", "a", "b", "--port", "9000", "--host", "0.0.0.0"])
    assert (args.targets, args.port, args.host) == (["a", "b"], 9000, "0.0.0.0")


def test_bad_targets_exit_2(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    args = build_parser().parse_args(["dashboard", str(tmp_path / "file")])
    assert args.func(args) == 2
    assert "neither a runs root nor a run directory" in capsys.readouterr().err
    args = build_parser().parse_args(["dashboard", str(tmp_path), "--port", "0"])
    assert args.func(args) == 2


def test_streamlit_command_binds_given_host():
    cmd = cli.streamlit_command(port=8123, host="127.0.0.1")
    assert cmd[1:4] == ["-m", "streamlit", "run"] and cmd[4].endswith("dashboards/Overview.py")
    assert cmd[cmd.index("--server.address") + 1] == "127.0.0.1"
    assert cmd[cmd.index("--server.port") + 1] == "8123"
    assert cmd[cmd.index("--server.headless") + 1] == "true"
