"""The raw ceiling: the Widget status patches that a reconciler would send, sent by plain
threads on a shared ``requests`` session (pykube-ng for the kubeconfig), with no framework,
no cache and no queue.

Reads ``name generation`` lines from ``--names``, merge-patches each Widget's status
subresource with the same body the reconcilers write, prints one JSON line with its counters
and exits. Side effects: network I/O to the API server.
"""

from __future__ import annotations

import argparse
import datetime
import json
import queue
import sys
import threading
import time
from pathlib import Path

import pykube

from bench.workload import WIDGET_API_VERSION, WIDGET_PLURAL, ready_status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--names", required=True, help="file of 'name generation' lines")
    args = parser.parse_args(argv)

    config = pykube.KubeConfig.from_file(args.kubeconfig)
    adapter = pykube.http.KubernetesHTTPAdapter(config, pool_connections=4, pool_maxsize=args.workers)
    http = pykube.HTTPClient(config, http_adapter=adapter)
    base = f"{http.url.rstrip('/')}/apis/{WIDGET_API_VERSION}/namespaces/{args.namespace}/{WIDGET_PLURAL}"
    work: queue.SimpleQueue[tuple[str, int] | None] = queue.SimpleQueue()
    for line in Path(args.names).read_text().splitlines():
        name, generation = line.split()
        work.put((name, int(generation)))
    for _ in range(args.workers):
        work.put(None)
    failures: list[str] = []
    patches = [0] * args.workers
    headers = {"Content-Type": "application/merge-patch+json", "Accept": "application/json"}

    def worker(index: int) -> None:
        while (item := work.get()) is not None:
            name, generation = item
            now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            body = json.dumps(ready_status(generation, now)).encode()
            response = http.session.patch(f"{base}/{name}/status", data=body, headers=headers, timeout=60)
            if response.status_code >= 400:
                failures.append(f"{name}: {response.status_code}")
            else:
                patches[index] += 1

    started = time.monotonic()
    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(args.workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.monotonic() - started
    print(json.dumps({"reconciles": sum(patches), "patches": sum(patches), "seconds": seconds}))
    for failure in failures[:10]:
        print(f"Failed to patch {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
