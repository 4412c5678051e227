"""nodewright's side of the cache-memory benchmark: one ``Informer`` filled with the Pods of a
namespace, with or without the default transform (which drops managedFields and interns
strings), or with a compressed store (managedFields dropped, each object kept as compressed
JSON).

Measures RSS before the informer starts and after it holds ``--expect`` Pods, both after
``gc.collect()`` and glibc's ``malloc_trim`` (the counterpart of Go's ``FreeOSMemory``), plus
the deep size of the stored objects counted once per distinct Python object. Prints one JSON
line. Side effects: network I/O to the API server.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import json
import sys
import time
from pathlib import Path
from typing import Any

from nodewright.runtime.informers.informer import Informer, default_transform
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import POD


def settle() -> int:
    """Collect garbage, hand free heap back to the OS, return VmRSS in bytes."""
    gc.collect()
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def deep_size(roots: list[Any]) -> int:
    """Bytes of every distinct object reachable from ``roots`` through dicts and lists."""
    seen: set[int] = set()
    total = 0
    stack = list(roots)
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, list):
            stack.extend(obj)
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--expect", type=int, default=0)
    parser.add_argument("--transform", choices=("default", "compressed", "none"), default="default")
    args = parser.parse_args(argv)

    client = Client.from_kubeconfig(args.kubeconfig)
    informer = Informer(
        client,
        POD,
        namespace=args.namespace,
        transform=None if args.transform == "none" else default_transform,
        compress=args.transform == "compressed",
    )
    baseline = settle()
    started = time.monotonic()
    informer.start()
    if not informer.wait_for_sync(900):
        print("the informer did not sync", file=sys.stderr)
        return 1
    while len(informer.store) < args.expect:
        time.sleep(0.05)
    sync_seconds = time.monotonic() - started
    rss = settle()
    objects = informer.store.stored()
    heap = deep_size(objects)
    informer.stop()
    print(
        json.dumps(
            {
                "objects": len(objects),
                "baseline_rss": baseline,
                "rss": rss,
                "heap": heap,
                "sync_seconds": sync_seconds,
                "transform": args.transform != "none",
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
