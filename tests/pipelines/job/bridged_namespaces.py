"""Network namespaces on a private Linux bridge, for tests that cut one machine's network as a cluster meets it.

Each namespace gets a veth pair: one end (with an address on the subnet and `lo` up, which PySpark's Python
workers need) inside it, the other attached to a bridge in the root namespace that holds the subnet's first
address. No forwarding or default route: traffic flows only between the namespaces and the bridge. `cut(i)` sets
namespace i's root-side end down, so its processes keep running but reach nothing, and nothing reaches them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass


class NamespacesUnavailable(RuntimeError):
    """Namespaces cannot be made here (not root, no `ip`, no CAP_NET_ADMIN); the message says which."""


def _ip(*args: str) -> str:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10)
    if done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, ["ip", *args], done.stdout, done.stderr)
    return done.stdout


@dataclass(frozen=True)
class BridgedNamespaces:
    """The bridge (`host_ip` in the root namespace) and, per namespace i, its name, address and root-side veth."""

    bridge: str
    host_ip: str
    names: tuple[str, ...]
    ips: tuple[str, ...]
    veths: tuple[str, ...]

    def prefix(self, i: int) -> tuple[str, ...]:
        """The command prefix that runs a program inside namespace i."""
        return ("ip", "netns", "exec", self.names[i])

    def cut(self, i: int) -> None:
        """Take namespace i off the network: its link to the bridge goes down."""
        _ip("link", "set", self.veths[i], "down")


def _kill_inside(name: str) -> None:
    """SIGKILL what still runs in namespace `name` (the test's own daemons' children, e.g. executors)."""
    with contextlib.suppress(subprocess.CalledProcessError):
        for pid in _ip("netns", "pids", name).split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)


@contextlib.contextmanager
def bridged_namespaces(count: int, subnet: str = "10.231.0") -> Iterator[BridgedNamespaces]:
    """`count` namespaces on a new bridge, addresses SUBNET.1 (bridge) and SUBNET.11, .12, ... (/24); all removed
    afterwards (processes left inside are killed first), also when the body fails."""
    if os.geteuid() != 0:
        raise NamespacesUnavailable("network namespaces need root (CAP_NET_ADMIN)")
    if shutil.which("ip") is None:
        raise NamespacesUnavailable("no `ip` command (iproute2)")
    tag = uuid.uuid4().hex[:4]
    net = BridgedNamespaces(
        bridge=f"wj{tag}br",
        host_ip=f"{subnet}.1",
        names=tuple(f"wj{tag}ns{i}" for i in range(count)),
        ips=tuple(f"{subnet}.{11 + i}" for i in range(count)),
        veths=tuple(f"wj{tag}v{i}" for i in range(count)),
    )
    made_bridge, made = False, []
    try:
        try:
            _ip("link", "add", net.bridge, "type", "bridge")
            made_bridge = True
            _ip("addr", "add", f"{net.host_ip}/24", "dev", net.bridge)
            _ip("link", "set", net.bridge, "up")
            for name, ip, veth in zip(net.names, net.ips, net.veths, strict=True):
                _ip("netns", "add", name)
                made.append((name, veth))
                _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", name)
                _ip("link", "set", veth, "master", net.bridge)
                _ip("link", "set", veth, "up")
                _ip("-n", name, "addr", "add", f"{ip}/24", "dev", "eth0")
                _ip("-n", name, "link", "set", "eth0", "up")
                _ip("-n", name, "link", "set", "lo", "up")
        except subprocess.CalledProcessError as err:
            raise NamespacesUnavailable(f"`{' '.join(err.cmd)}` failed: {err.stderr.strip()}") from err
        yield net
    finally:
        for name, veth in reversed(made):
            _kill_inside(name)
            with contextlib.suppress(subprocess.CalledProcessError):
                _ip("link", "del", veth)  # removes both ends
            with contextlib.suppress(subprocess.CalledProcessError):
                _ip("netns", "del", name)
        if made_bridge:
            with contextlib.suppress(subprocess.CalledProcessError):
                _ip("link", "del", net.bridge)
