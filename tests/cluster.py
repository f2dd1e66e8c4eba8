"""A throw-away Redis Cluster of three masters on free ports, for the cluster tests.

Each node is a :class:`RedisInstance` of the fault harness (its own port and folder,
stopped by its PID) started with cluster mode on; ``redis-cli --cluster create`` joins
them and assigns the 16384 slots, a third each.
"""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import time

import redis
from redis.exceptions import RedisError

from tests.faults.processes import ServiceError, child_env
from tests.faults.servers import RedisInstance


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def cluster_port() -> int:
    """A free port whose cluster bus port (+10000) is free too and below 65536."""
    for _ in range(200):
        port = random.randint(20000, 39999)
        if _free(port) and _free(port + 10000):
            return port
    raise ServiceError("no free port pair for a cluster node")


class ClusterNode(RedisInstance):
    def __init__(self) -> None:
        super().__init__(port=cluster_port())

    def args(self) -> list[str]:
        return [
            *super().args(),
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            f"nodes-{self.port}.conf",
            "--cluster-node-timeout",
            "5000",
        ]


class LocalCluster:
    """Three masters, no replicas; ``url`` names the first (the client finds the rest)."""

    def __init__(self, masters: int = 3) -> None:
        self.nodes = [ClusterNode() for _ in range(masters)]

    @property
    def url(self) -> str:
        return self.nodes[0].url

    def start(self, timeout_s: float = 60.0) -> LocalCluster:
        try:
            self._start(timeout_s)
        except BaseException:
            self.close()
            raise
        return self

    def _start(self, timeout_s: float) -> None:
        for node in self.nodes:
            node.start()
        cli = shutil.which("redis-cli") or "/usr/bin/redis-cli"
        addresses = [f"127.0.0.1:{n.port}" for n in self.nodes]
        made = subprocess.run(
            [cli, "--cluster", "create", *addresses, "--cluster-replicas", "0", "--cluster-yes"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=child_env(),
        )
        if made.returncode != 0:
            raise ServiceError(f"redis-cli --cluster create failed:\n{made.stdout}{made.stderr}")
        self._wait_ok(timeout_s)

    def _wait_ok(self, timeout_s: float) -> None:
        """Every node must see the whole cluster as ok, not only the one asked."""
        deadline = time.monotonic() + timeout_s
        while True:
            states = [self._state(node) for node in self.nodes]
            if all(state == "ok" for state in states):
                return
            if time.monotonic() > deadline:
                raise ServiceError(f"cluster did not reach cluster_state:ok: {states}")
            time.sleep(0.1)

    @staticmethod
    def _state(node: RedisInstance) -> str:
        client = node.client()
        try:
            info = client.execute_command("CLUSTER INFO")
        except RedisError as exc:
            return f"error {exc}"
        finally:
            client.close()
        # redis-py parses the reply into a dict of str.
        return str(info.get("cluster_state", "unknown")) if isinstance(info, dict) else "unknown"

    def node_clients(self) -> list[redis.Redis]:
        """A plain client per master: what each one holds, seen from the node itself."""
        return [node.client() for node in self.nodes]

    def close(self) -> None:
        for node in self.nodes:
            node.close()
