"""Two machines on one host for the tests: network namespaces joined by a veth pair, each side with its own address.

`Link` puts one end of a veth pair in the test's own namespace (the first node: a Ray head the driver can reach,
beside the PostgreSQL server the tests start on 127.0.0.1) and the other end in a new network namespace (the
second node), with the two addresses of a /24 chosen at random in 10.0.0.0/8 and checked against the addresses
and routes already here, so that tests running at the same time never share one. Nothing in the new namespace
reaches the first node's 127.0.0.1, nor the other way round: code that assumes both nodes share one host (a
rendezvous at 127.0.0.1, a server bound to loopback) fails there, as it would between two machines.

`RayNodes` starts a real Ray cluster on it: the head on the first address, a worker node inside the namespace on
the second, each a `ray start --block` process in its own process group; `stop` ends both groups, and `Link.delete`
removes the namespace and the veth pair. Needs root (the tests run as root, CI too) and `ip` (iproute2).
"""

from __future__ import annotations

import ipaddress
import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run `ip ARGS`; a failure raises with ip's message."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and done.returncode:
        raise RuntimeError(f"ip {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
    return done


def networks_in_use() -> list[ipaddress.IPv4Network]:
    """The IPv4 networks of every address and route of this host's namespace."""
    found = []
    for link in json.loads(ip("-j", "-4", "addr").stdout or "[]"):
        for entry in link.get("addr_info", []):
            found.append(ipaddress.ip_network(f"{entry['local']}/{entry['prefixlen']}", strict=False))
    for route in json.loads(ip("-j", "-4", "route").stdout or "[]"):
        if route.get("dst") not in (None, "default"):
            found.append(ipaddress.ip_network(route["dst"], strict=False))
    return found


def random_subnet() -> ipaddress.IPv4Network:
    """A /24 in 10.0.0.0/8 that overlaps nothing this host has an address or a route for."""
    used = networks_in_use()
    for _ in range(100):
        net = ipaddress.ip_network(f"10.{random.randint(16, 254)}.{random.randint(0, 255)}.0/24")
        if not any(net.overlaps(other) for other in used):
            return net
    raise RuntimeError("no free /24 in 10.0.0.0/8")


class Link:
    """A veth pair from this namespace to a new one: `here` is this side's address, `there` the other side's."""

    def __init__(self) -> None:
        tag = secrets.token_hex(3)
        self.namespace = f"modelci-{tag}"
        self.devices = (f"mci{tag}a", f"mci{tag}b")  # interface names hold at most 15 characters
        net = random_subnet()
        self.prefix = net.prefixlen
        self.here, self.there = str(net.network_address + 1), str(net.network_address + 2)
        self.made: list[str] = []

    def create(self) -> Link:
        """Make the namespace and the veth pair, address both ends and bring them up (with the namespace's lo)."""
        try:
            ip("netns", "add", self.namespace)
            self.made.append("netns")
            ip("link", "add", self.devices[0], "type", "veth", "peer", "name", self.devices[1])
            self.made.append("veth")
            ip("link", "set", self.devices[1], "netns", self.namespace)
            ip("addr", "add", f"{self.here}/{self.prefix}", "dev", self.devices[0])
            ip("link", "set", self.devices[0], "up")
            ip("-n", self.namespace, "addr", "add", f"{self.there}/{self.prefix}", "dev", self.devices[1])
            ip("-n", self.namespace, "link", "set", self.devices[1], "up")
            ip("-n", self.namespace, "link", "set", "lo", "up")
        except BaseException:
            self.delete()
            raise
        return self

    def inside(self, cmd: list[str]) -> list[str]:
        """`cmd` run inside the namespace."""
        return ["ip", "netns", "exec", self.namespace, *cmd]

    def delete(self) -> None:
        """Remove the veth pair (both ends go together) and the namespace; what is already gone is fine."""
        if "veth" in self.made:
            ip("link", "delete", self.devices[0], check=False)
        if "netns" in self.made:
            ip("netns", "delete", self.namespace, check=False)
        self.made = []

    def __enter__(self) -> Link:
        return self.create()

    def __exit__(self, *exc: object) -> None:
        self.delete()


def free_port(address: str) -> int:
    """A TCP port on `address` (of this namespace) that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind((address, 0))
        return sock.getsockname()[1]


class RayNodes:
    """A Ray cluster of two nodes on a `Link`: the head on `link.here`, a worker node inside the namespace on
    `link.there`, each with `cpus` CPUs, a small object store and no dashboard.

    Ray comes from this interpreter's environment (`python -m ray.scripts.scripts`, the `ray` command's module).
    Each node's session files go into its own temporary folder, so that another cluster on this host (another
    test, another user) is never the one found. `address` is the head's GCS address, for `ray_address`.
    """

    def __init__(self, link: Link, cpus: int = 1, object_store_bytes: int = 80 * 1024**2) -> None:
        self.link = link
        self.cpus = cpus
        self.object_store_bytes = object_store_bytes
        self.folder = Path(tempfile.mkdtemp(prefix="mci-ray-", dir="/tmp"))  # short: Ray's socket paths must fit
        self.port = free_port(link.here)
        self.address = f"{link.here}:{self.port}"
        self.procs: list[subprocess.Popen] = []

    def _ray(self, args: list[str], name: str, inside: bool) -> subprocess.Popen:
        cmd = [sys.executable, "-m", "ray.scripts.scripts", "start", *args, "--block", f"--num-cpus={self.cpus}",
               "--num-gpus=0", f"--object-store-memory={self.object_store_bytes}", "--disable-usage-stats"]
        env = {**os.environ, **self.environ(), "RAY_TMPDIR": str(self.folder / name)}
        (self.folder / name).mkdir()
        log = open(self.folder / f"{name}.log", "wb")  # noqa: SIM115 - the process holds it
        proc = subprocess.Popen(self.link.inside(cmd) if inside else cmd, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        log.close()
        self.procs.append(proc)
        return proc

    def start(self, timeout: float = 120) -> RayNodes:
        """Start the head, then the worker node, and wait until the cluster has both nodes alive."""
        try:
            self._ray(["--head", f"--node-ip-address={self.link.here}", f"--port={self.port}",
                       f"--temp-dir={self.folder / 'head'}", "--include-dashboard=false"], "head", inside=False)
            self._wait_for_gcs(timeout)
            self._ray([f"--address={self.address}", f"--node-ip-address={self.link.there}"], "worker", inside=True)
            self.wait_for_nodes(2, timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_for_gcs(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                with socket.create_connection((self.link.here, self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"Ray's head did not listen on {self.address} within {timeout:g} s:\n{self.logs()}")

    def environ(self) -> dict[str, str]:
        """What a process joining this cluster (a node, a driver) needs in its environment: this cluster's session
        folder, and no token authentication, whatever a token file in the home folder (`ray get-auth-token
        --generate`, another cluster's) would switch on."""
        return {"RAY_TMPDIR": str(self.folder / "head"), "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}

    def alive_nodes(self) -> list[str]:
        """The addresses of the cluster's live nodes, as the GCS says (a short-lived driver in a subprocess)."""
        probe = ("import json, ray; ray.init(address=%r, logging_level='ERROR', log_to_driver=False); "
                 "print(json.dumps([n['NodeManagerAddress'] for n in ray.nodes() if n['Alive']]))" % self.address)
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                              env=dict(os.environ, **self.environ()))
        if done.returncode:
            return []
        return json.loads(done.stdout.strip().splitlines()[-1])

    def wait_for_nodes(self, count: int, timeout: float) -> list[str]:
        """Wait until `count` nodes are alive; their addresses."""
        deadline = time.monotonic() + timeout
        while True:
            self._check_alive()
            nodes = self.alive_nodes()
            if len(nodes) >= count:
                return nodes
            if time.monotonic() > deadline:
                raise RuntimeError(f"the cluster has {len(nodes)} of {count} nodes after {timeout:g} s:\n{self.logs()}")
            time.sleep(1)

    def _check_alive(self) -> None:
        for proc in self.procs:
            if proc.poll() is not None:
                raise RuntimeError(f"`ray start` exited with {proc.returncode}:\n{self.logs()}")

    def logs(self) -> str:
        """The tail of each node's `ray start` output."""
        return "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')[-3000:]}"
                         for log in sorted(self.folder.glob("*.log")))

    def stop(self) -> None:
        """End both nodes: SIGTERM to each `ray start --block` group (it stops its node's processes), then
        SIGKILL to whatever of the group is left."""
        for proc in self.procs:
            _signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
        self.procs = []
        shutil.rmtree(self.folder, ignore_errors=True)  # the nodes' session files and logs


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def processes_naming(text: str) -> list[str]:
    """The command lines of the live processes whose command line holds `text` (a cluster's session folder: every
    Ray process of a node names it), but this process's."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if text in cmdline and state != "Z":
                found.append(f"{entry.name}: {cmdline[:300]}")
    return found
