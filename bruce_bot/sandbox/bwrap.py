"""The bubblewrap command line of one run.

Every run gets new user, PID, IPC, UTS, cgroup and network namespaces (`--unshare-all`), dies
with the daemon (`--die-with-parent`), cannot reach the terminal (`--new-session`), has no
capabilities and runs as `nobody` (65534) inside. The system is mounted read-only: /usr (and the
/bin, /lib, /lib64, /sbin links into it) and a minimal /etc — passwd and group stubs, the CA
certificates, the dynamic linker's cache, /etc/alternatives, and /etc/resolv.conf only with the
network. /tmp is a fresh tmpfs of bounded size, /proc a fresh one of the new PID namespace,
/dev the minimal set bubblewrap makes. The session's workspace is mounted read-write at
/workspace and is the working directory; an optional virtualenv is mounted read-only at its own
path. The environment is emptied (`--clearenv`) but for PATH, HOME=/workspace and LANG.

Host paths the daemon can reach but the sandbox user may not (the workspace under the 0700 data
dir, the virtualenv) are passed as open file descriptors (`--bind-fd`, `--ro-bind-fd`), and the
small /etc files as pipes (`--ro-bind-data`), so bubblewrap never needs to walk the data dir.
Nothing else of the host is visible: not the data dir, the database, config.yml, other
sessions' media, the daemon's home or its environment.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

BWRAP = "bwrap"
WORKSPACE = "/workspace"
INNER_UID = 65534
SYSTEM_LINKS = {"/bin": "usr/bin", "/sbin": "usr/sbin", "/lib": "usr/lib", "/lib64": "usr/lib64"}
# Read-only host paths of /etc a program may need; missing ones are skipped (`--ro-bind-try`).
ETC_PATHS = (
    "/etc/ssl/certs",
    "/etc/ssl/openssl.cnf",
    "/etc/ca-certificates.conf",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/localtime",
)
PASSWD = (
    "root:x:0:0:root:/nonexistent:/usr/sbin/nologin\n"
    "sandbox:x:65534:65534:sandbox:/workspace:/bin/sh\n"
)
GROUP = "root:x:0:\nsandbox:x:65534:\n"
HOSTS = "127.0.0.1 localhost sandbox\n::1 localhost\n"
NSSWITCH = "passwd: files\ngroup: files\nhosts: files dns\n"
PATH = "/usr/local/bin:/usr/bin:/bin"


@dataclass(frozen=True, slots=True)
class Mounts:
    """The descriptors bubblewrap reads its mounts from (open in the child)."""

    workspace_fd: int
    # /etc files written from pipes: destination -> read end.
    etc_fds: Mapping[str, int] = field(default_factory=dict)
    # The code, mounted read-only at `code_path` (a memfd).
    code: tuple[int, str] | None = None
    # A read-only virtualenv: its descriptor and the path it is mounted at (its own).
    python_env: tuple[int, Path] | None = None


def etc_files(network: bool, dns: str | None = None) -> dict[str, str]:
    """The /etc files made up for the sandbox: destination -> content."""
    files = {
        "/etc/passwd": PASSWD,
        "/etc/group": GROUP,
        "/etc/hosts": HOSTS,
        "/etc/nsswitch.conf": NSSWITCH,
    }
    if network and dns:
        files["/etc/resolv.conf"] = f"nameserver {dns}\n"
    return files


def environment(python_env: Path | None) -> dict[str, str]:
    path = PATH if python_env is None else f"{python_env / 'bin'}:{PATH}"
    env = {"PATH": path, "HOME": WORKSPACE, "LANG": "C.UTF-8"}
    if python_env is not None:
        env["VIRTUAL_ENV"] = str(python_env)
    return env


def bwrap_argv(
    command: Sequence[str],
    mounts: Mounts,
    *,
    tmp_bytes: int,
    block_fd: int | None = None,
    info_fd: int | None = None,
    privileged: bool = False,
    bwrap: str = BWRAP,
) -> list[str]:
    """The whole command line: bubblewrap's options, then `command` run inside."""
    argv = [bwrap, *_identity(privileged)]
    argv += ["--die-with-parent", "--new-session", "--hostname", "sandbox"]
    argv += ["--ro-bind", "/usr", "/usr"]
    for link, target in SYSTEM_LINKS.items():
        argv += ["--symlink", target, link]
    argv += ["--dir", "/etc"]
    for path in ETC_PATHS:
        argv += ["--ro-bind-try", path, path]
    for destination, fd in sorted(mounts.etc_fds.items()):
        argv += ["--perms", "0444", "--ro-bind-data", str(fd), destination]
    if mounts.code is not None:
        argv += ["--perms", "0444", "--ro-bind-data", str(mounts.code[0]), mounts.code[1]]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    argv += ["--perms", "1777", "--size", str(tmp_bytes), "--tmpfs", "/tmp"]
    argv += ["--bind-fd", str(mounts.workspace_fd), WORKSPACE]
    python_env: Path | None = None
    if mounts.python_env is not None:
        fd, python_env = mounts.python_env
        argv += ["--ro-bind-fd", str(fd), str(python_env)]
    # The launcher changes into /workspace: as root, bubblewrap (no capability left) may not.
    argv += ["--chdir", "/", "--clearenv"]
    for name, value in environment(python_env).items():
        argv += ["--setenv", name, value]
    if info_fd is not None:
        argv += ["--info-fd", str(info_fd)]
    if block_fd is not None:
        argv += ["--block-fd", str(block_fd)]
    if privileged:
        command = [*SETPRIV, "--", *command]
    argv += ["--", *command]
    return argv


# Started by root, bubblewrap keeps the host's user namespace (inside one, the code would be
# root's own uid, which no process limit binds) and setpriv makes the code `nobody` with no
# capability left, none to gain (no_new_privs) and no supplementary group.
SETPRIV = [
    "/usr/bin/setpriv",
    f"--reuid={INNER_UID}",
    f"--regid={INNER_UID}",
    "--clear-groups",
    "--inh-caps=-all",
    "--bounding-set=-all",
    "--no-new-privs",
]


def _identity(privileged: bool) -> list[str]:
    """The namespaces and the user: an ordinary user's bubblewrap makes a user namespace where
    the code is uid 65534 with no capabilities and no further user namespace; root's keeps
    the host's, drops every capability but the two setpriv needs to become nobody."""
    if privileged:
        unshare = ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup"]
        unshare += ["--unshare-net"]
        caps = ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        return [*unshare, *caps]
    return [
        "--unshare-all",  # user, pid, ipc, uts, cgroup and network namespaces
        "--unshare-user",  # the user namespace for certain (--unshare-all only tries)
        "--disable-userns",  # no nested user namespace to regain capabilities in
        "--cap-drop",
        "ALL",
        "--uid",
        str(INNER_UID),
        "--gid",
        str(INNER_UID),
    ]


CODE_DIR = "/code"


def code_path(language: str) -> str:
    """Where the code is mounted (read-only, outside the workspace: it is no file it created)."""
    return f"{CODE_DIR}/main.py" if language == "python" else f"{CODE_DIR}/main.sh"


def interpreter(language: str, python_env: Path | None) -> list[str]:
    """The command that runs the code: the system python3 (or the virtualenv's) in isolated
    mode, or /bin/sh; the code itself is a read-only file, stdin is empty."""
    if language == "python":
        python = "/usr/bin/python3" if python_env is None else str(python_env / "bin" / "python")
        return [python, "-I", "-u", code_path(language)]
    return ["/bin/sh", code_path(language)]
