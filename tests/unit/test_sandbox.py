"""The sandbox's pieces on their own (bruce_bot/sandbox/): the bubblewrap command line, the
limits, the output cap, reading out/ without following links, the workspaces' retention."""

from __future__ import annotations

import os
import resource
from pathlib import Path

from bruce_bot.sandbox import bwrap, workspace
from bruce_bot.sandbox.limits import MB, Limits
from bruce_bot.sandbox.runner import Captured


def pairs(argv: list[str], option: str) -> list[str]:
    """The values following each `option` in `argv`."""
    return [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == option]


def test_an_ordinary_users_sandbox_unshares_everything_and_runs_as_nobody() -> None:
    argv = bwrap.bwrap_argv(["/bin/true"], bwrap.Mounts(7), tmp_bytes=MB)
    options = argv[: argv.index("--")]
    for flag in ("--unshare-all", "--unshare-user", "--die-with-parent", "--new-session",
                 "--clearenv", "--disable-userns"):  # fmt: skip
        assert flag in options
    assert "--share-net" not in options and "--bind" not in options
    assert pairs(options, "--cap-drop") == ["ALL"] and pairs(options, "--uid") == ["65534"]
    assert pairs(options, "--ro-bind") == ["/usr"]
    assert pairs(options, "--bind-fd") == ["7"]  # the workspace, by descriptor
    assert argv[argv.index("--") + 1 :] == ["/bin/true"]


def test_the_environment_is_only_path_home_and_lang() -> None:
    argv = bwrap.bwrap_argv(["/bin/true"], bwrap.Mounts(7), tmp_bytes=MB)
    names = pairs(argv, "--setenv")
    assert sorted(names) == ["HOME", "LANG", "PATH"]
    assert argv[argv.index("HOME") + 1] == "/workspace"


def test_roots_sandbox_keeps_the_host_user_namespace_and_makes_the_code_nobody() -> None:
    argv = bwrap.bwrap_argv(["/bin/true"], bwrap.Mounts(7), tmp_bytes=MB, privileged=True)
    options = argv[: argv.index("--")]
    assert "--unshare-user" not in options and "--unshare-net" in options
    assert pairs(options, "--cap-add") == ["CAP_SETUID", "CAP_SETGID"]
    command = argv[argv.index("--") + 1 :]
    assert command[0] == "/usr/bin/setpriv" and "--reuid=65534" in command
    assert "--no-new-privs" in command and command[-1] == "/bin/true"


def test_a_virtualenv_is_mounted_read_only_and_first_on_the_path(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    mounts = bwrap.Mounts(7, python_env=(9, venv))
    argv = bwrap.bwrap_argv(["/bin/true"], mounts, tmp_bytes=MB)
    assert argv[argv.index("--ro-bind-fd") + 1 : argv.index("--ro-bind-fd") + 3] == ["9", str(venv)]
    path = argv[argv.index("PATH") + 1]
    assert path.startswith(f"{venv}/bin:")
    assert bwrap.interpreter("python", venv)[0] == f"{venv}/bin/python"


def test_etc_has_stubs_and_resolv_conf_only_with_the_network() -> None:
    assert "/etc/resolv.conf" not in bwrap.etc_files(network=False, dns="10.0.2.3")
    files = bwrap.etc_files(network=True, dns="10.0.2.3")
    assert files["/etc/resolv.conf"] == "nameserver 10.0.2.3\n"
    assert "root:x:0:0" in files["/etc/passwd"] and "/root" not in files["/etc/passwd"]
    assert all(path.startswith("/etc/") for path in bwrap.ETC_PATHS)
    assert "/etc/ssl/private" not in bwrap.ETC_PATHS and "/etc/shadow" not in bwrap.ETC_PATHS


def test_the_limits_become_rlimits() -> None:
    limits = Limits(timeout_seconds=10, memory_mb=256, max_processes=32, workspace_mb=5)
    values = dict(limits.rlimits())
    assert values[resource.RLIMIT_AS] == 256 * MB
    assert values[resource.RLIMIT_CPU] == 11
    assert values[resource.RLIMIT_NPROC] == 32
    assert values[resource.RLIMIT_FSIZE] == 5 * MB
    assert values[resource.RLIMIT_CORE] == 0


def test_output_beyond_the_cap_is_counted_not_kept() -> None:
    captured = Captured(cap=10)
    for _ in range(1000):
        captured.add(b"x" * 1000)
    assert len(captured.kept) == 10 and captured.total == 1_000_000
    assert captured.cut == 999_990


def test_out_files_are_read_without_following_links_or_special_files(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    workspace.prepare(root, None)
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    (root / "out" / "ok.txt").write_text("fine")
    (root / "out" / "big.bin").write_bytes(b"0" * 2000)
    os.symlink(secret, root / "out" / "link.txt")
    os.mkfifo(root / "out" / "pipe")
    names = ["out/ok.txt", "out/big.bin", "out/link.txt", "out/pipe", "out/../x", "in/a.txt"]
    files = {f.name: f for f in workspace.read_out(root, names, max_bytes=1000, max_files=10)}
    assert files["ok.txt"].data == b"fine"
    assert files["big.bin"].data is None and "over 1,000 bytes" in files["big.bin"].problem
    assert files["link.txt"].data is None and "symbolic link" in files["link.txt"].problem
    assert files["pipe"].data is None and "not a regular file" in files["pipe"].problem
    assert set(files) == {"ok.txt", "big.bin", "link.txt", "pipe"}


def test_an_out_folder_replaced_by_a_link_yields_nothing(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    workspace.prepare(root, None)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "config.yml").write_text("api_key: secret")
    os.rmdir(root / "out")
    os.symlink(elsewhere, root / "out")
    assert workspace.read_out(root, ["out/config.yml"], 1000, 10) == []


def test_files_copied_in_get_plain_names(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    workspace.prepare(root, None)
    names = workspace.copy_in(root, [("../../etc/passwd", b"x"), (".hidden", b"y")], None)
    assert names == ["_.._etc_passwd", "hidden"]
    assert (root / "in" / "_.._etc_passwd").read_bytes() == b"x"


# ---- workspaces kept for the retention and deleted with their session -------------------------

DAY = 86_400.0


def a_workspace(data_dir: Path, session_id: int, touched: float) -> Path:
    """A workspace with a file in out/, every entry last touched at `touched`."""
    root = workspace.workspace_dir(data_dir, session_id)
    (root / "out").mkdir(parents=True)
    (root / "out" / "plot.png").write_bytes(b"png")
    for path in (root / "out" / "plot.png", root / "out", root):
        os.utime(path, (touched, touched))
    return root


def test_workspaces_untouched_for_the_retention_go_and_the_others_stay(tmp_path: Path) -> None:
    now = 1_800_000_000.0
    old = a_workspace(tmp_path, 1, now - 31 * DAY)
    recent = a_workspace(tmp_path, 2, now - 29 * DAY)
    touched_lately = a_workspace(tmp_path, 3, now - 90 * DAY)
    os.utime(touched_lately / "out" / "plot.png", (now - DAY, now - DAY))  # one file is recent
    assert workspace.sweep(tmp_path, 30, now=now) == 1
    assert not old.exists() and recent.is_dir() and touched_lately.is_dir()
    assert workspace.sweep(tmp_path, 0, now=now + 365 * DAY) == 0  # 0: kept for ever
    assert recent.is_dir()


def test_a_deleted_sessions_workspace_goes_without_following_a_link(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("not the workspace's")
    root = a_workspace(tmp_path / "data", 7, 0.0)
    (root / "link").symlink_to(outside)
    other = a_workspace(tmp_path / "data", 8, 0.0)
    assert workspace.remove_workspaces(tmp_path / "data", [7, 99]) == 2  # plot.png and the link
    assert not root.exists() and other.is_dir()
    assert (outside / "keep.txt").read_text() == "not the workspace's"
