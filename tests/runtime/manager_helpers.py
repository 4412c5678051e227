"""Helpers shared by the manager tests: run a real Manager in a thread, probe it over HTTP."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from typing import Any

from nodewright.runtime.process.config import parse_config
from nodewright.runtime.process.manager import Manager


def config_data(namespace: str, **overrides: Any) -> dict[str, Any]:
    """A config for tests: ephemeral ports, short leader election in the test's namespace."""
    data: dict[str, Any] = {
        "metrics": {"bindAddress": "127.0.0.1:0", "secure": False},  # plain HTTP: tests scrape it
        "health": {"bindAddress": "127.0.0.1:0"},
        "leaderElection": {
            "enabled": True,
            "namespace": namespace,
            "name": "manager-lease",
            "leaseDuration": 3,
            "renewDeadline": 2,
            "retryPeriod": 0.5,
            "writeFenceMargin": 0.5,
        },
        "cacheSyncTimeout": 20,
        "gracefulShutdownTimeout": 5,
    }
    data.update(overrides)
    return data


class RunningManager:
    """A manager whose ``run`` executes in a background thread."""

    def __init__(self, manager: Manager) -> None:
        self.manager = manager
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.manager.run()
        except BaseException as error:
            self.error = error

    def stop(self, timeout: float = 15) -> None:
        self.manager.stop()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "manager did not stop"


def make_manager(cluster: Any, namespace: str, **overrides: Any) -> Manager:
    config = parse_config(config_data(namespace, **overrides), "test")
    return Manager(config, kubeconfig=str(cluster.kubeconfig))


def http_get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read().decode()
