"""The cache-memory benchmark: how many bytes an informer spends per cached Pod.

Creates P Pods with realistic specs (``workload.pod_body``) in a fresh namespace, in parallel
and with a field manager so the API server writes managedFields as it does for real Pods
(no scheduler or kubelet runs, so they stay Pending), then runs, one at a time: nodewright's
``Informer`` with its default transform and without one, and a client-go informer (Go) with
and without a managedFields-stripping transform. Each reports RSS before and after filling
its cache (after garbage collection); bytes per Pod = RSS delta / Pods. Python also reports
the deep size of the stored objects, Go the live heap delta.

Side effects: creates a namespace and Pods, starts processes.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.kube import Api, create_many
from bench.processes import Contender, RunningProcess
from bench.workload import pod_body

__all__ = ["CacheRun", "create_pods", "run_cache_contender"]


@dataclass
class CacheRun:
    """One informer's memory figures."""

    contender: str
    family: str
    transform: bool
    objects: int = 0
    rss_delta_bytes: int | None = None
    bytes_per_object: float | None = None
    heap_bytes_per_object: float | None = None
    sync_seconds: float | None = None
    peak_rss_bytes: int | None = None
    error: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def create_pods(api: Api, count: int) -> tuple[str, float]:
    """Create ``count`` Pods in a new namespace; returns (namespace, seconds it took)."""
    namespace = f"bench-pods-{uuid.uuid4().hex[:6]}"
    api.create_namespace(namespace)
    started = time.monotonic()
    create_many(
        api,
        f"/api/v1/namespaces/{namespace}/pods",
        (pod_body(f"shop-{i:06d}", i) for i in range(count)),
        workers=16,
        field_manager="kube-controller-manager",
    )
    return namespace, time.monotonic() - started


def run_cache_contender(
    api: Api, contender: Contender, namespace: str, count: int, log_dir: Path, *, transform: bool
) -> CacheRun:
    """Run one cache contender to completion and turn its report into bytes per Pod."""
    command = tuple(
        part.format(namespace=namespace, kubeconfig=api.kubeconfig, expect=count)
        for part in contender.command
    )
    process = RunningProcess(
        Contender(
            f"{contender.name}-cache-{'transform' if transform else 'plain'}",
            contender.family,
            command,
            oneshot=True,
        ),
        log_dir,
        {"KUBECONFIG": str(api.kubeconfig)},
    )
    result = CacheRun(contender.name, contender.family, transform)
    exited = process.wait(900)
    if not exited:
        process.stop()
    result.peak_rss_bytes = process.peak_rss_bytes
    report = process.report()
    if not exited or process.exit_code != 0 or not report:
        result.error = f"exit code {process.exit_code}\n{process.stderr_tail()}"
        return result
    objects = int(report["objects"])
    result.objects = objects
    result.rss_delta_bytes = int(report["rss"]) - int(report["baseline_rss"])
    result.bytes_per_object = result.rss_delta_bytes / max(objects, 1)
    heap = int(report["heap"]) - int(report.get("baseline_heap", 0))
    result.heap_bytes_per_object = heap / max(objects, 1)
    result.sync_seconds = float(report["sync_seconds"])
    return result
