#!/usr/bin/env python3
"""A stand-in for ``ssh`` that makes this machine look like several hosts (test fixture).

Hydra (MPICH's mpiexec) starts its proxy on each remote host as ``ssh -x HOST "proxy" args...``.
Given as ``-launcher ssh -launcher-exec fake_ssh.py``, this script receives the same arguments
and runs the command the way sshd would, through ``sh -c`` with the words joined by spaces, but
locally, inside a new UTS namespace whose host name is HOST (``unshare --uts``; needs root or
user namespaces). So everything the job does on "host b" sees ``socket.gethostname() == "b"``,
MPICH treats the hosts as separate nodes, and the processes of each host can be found afterwards
through their namespace.

Test controls, from the environment:

* ``FAKE_SSH_RECORD=FILE``: append ``HOST UTS-NAMESPACE PID`` per started host to FILE.
* ``FAKE_SSH_UNREACHABLE=h1,h2``: these hosts fail like ssh does (exit 255, "Connection refused").
* ``FAKE_SSH_HIDE=HOST:/path[,HOST:/path]``: on HOST, an empty tmpfs is mounted over /path (a
  new mount namespace), as if the path did not exist there.
"""

import os
import socket
import subprocess
import sys

# ssh options that take a value (OpenSSH's getopt string), so that the host is found after them.
_WITH_VALUE = set("BbcDEeFIiJLlmOoPpQRSWw")


def split_ssh_args(argv: list[str]) -> tuple[str, list[str]]:
    """``[-x] [-o opt] [user@]host command...`` -> (host, command words)."""
    i = 0
    while i < len(argv) and argv[i].startswith("-") and argv[i] != "--":
        flags = argv[i][1:]
        i += 1
        for pos, flag in enumerate(flags):
            if flag in _WITH_VALUE:
                if pos == len(flags) - 1:
                    i += 1  # the value is the next word
                break
    if i < len(argv) and argv[i] == "--":
        i += 1
    if i >= len(argv):
        sys.exit("usage: fake_ssh.py [ssh options] host command...")
    return argv[i].rsplit("@", 1)[-1], argv[i + 1 :]


def _hidden_paths(host: str) -> list[str]:
    pairs = [p.split(":", 1) for p in os.environ.get("FAKE_SSH_HIDE", "").split(",") if ":" in p]
    return [path for h, path in pairs if h == host]


def outside(argv: list[str]) -> None:
    host, words = split_ssh_args(argv)
    unreachable = os.environ.get("FAKE_SSH_UNREACHABLE", "").split(",")
    if host in unreachable:
        print(f"ssh: connect to host {host} port 22: Connection refused", file=sys.stderr)
        sys.exit(255)
    namespaces = ["--uts"] + (["--mount", "--propagation", "private"] if _hidden_paths(host) else [])
    inside = [sys.executable, os.path.abspath(__file__), "--inside", host, " ".join(words)]
    # A remote command inherits nothing but stdin, stdout and stderr: without this, a "remote"
    # Hydra proxy would hold mpiexec's listening socket open and wait on it forever.
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    try:
        os.execvp("unshare", ["unshare", *namespaces, "--", *inside])
    except OSError as err:
        print(f"fake_ssh: cannot run unshare: {err}", file=sys.stderr)
        sys.exit(255)


def inside(host: str, command: str) -> None:
    socket.sethostname(host)
    for path in _hidden_paths(host):
        subprocess.run(["mount", "-t", "tmpfs", "fake_ssh_hidden", path], check=True)
    record = os.environ.get("FAKE_SSH_RECORD")
    if record:
        with open(record, "a") as f:
            f.write(f"{host} {os.readlink('/proc/self/ns/uts')} {os.getpid()}\n")
    os.execv("/bin/sh", ["sh", "-c", command])


if __name__ == "__main__":
    if sys.argv[1:2] == ["--inside"]:
        inside(sys.argv[2], sys.argv[3])
    else:
        outside(sys.argv[1:])
