"""Command line: run the ARM emulator standalone until interrupted.

``python -m nodewright.cloud.emulator --seed FILE --port 0 --state-dir DIR`` starts the server,
applies the seed file, writes ``DIR/endpoint.json`` (endpoint, CA file, subscription) and prints
the endpoint and CA path on stdout, one ``key=value`` per line.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from nodewright.cloud.emulator.seed import load_seed_file
from nodewright.cloud.emulator.server import ArmEmulator
from nodewright.cloud.emulator.state import DEFAULT_SUBSCRIPTION


def _parse(arguments: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m nodewright.cloud.emulator", description=__doc__)
    parser.add_argument("--seed", type=Path, help="seed file (YAML or JSON) describing the starting estate")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0 picks a free one)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (loopback by default)")
    parser.add_argument(
        "--state-dir", type=Path, required=True, help="directory for the CA, certificate and endpoint.json"
    )
    parser.add_argument("--operation-duration", type=float, help="seconds every long-running operation takes")
    parser.add_argument(
        "--retry-after",
        type=float,
        help="Retry-After seconds while an operation runs (default 10, as ARM documents; 0: none)",
    )
    parser.add_argument("--verbose", action="store_true", help="log every request")
    return parser.parse_args(arguments)


def main(arguments: list[str] | None = None) -> int:
    options = _parse(arguments)
    logging.basicConfig(level=logging.DEBUG if options.verbose else logging.INFO, format="%(message)s")
    emulator = ArmEmulator(state_dir=options.state_dir, port=options.port, host=options.host)
    if options.seed is not None:
        emulator.estate.apply(load_seed_file(options.seed))
    if options.operation_duration is not None:
        emulator.state.operation_duration = options.operation_duration
    if options.retry_after is not None:
        emulator.state.operation_retry_after = options.retry_after or None
    stop = threading.Event()

    def request_stop(signal_number: int, frame: FrameType | None) -> None:
        del signal_number, frame
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    with emulator:
        details = {
            "endpoint": emulator.endpoint,
            "ca_file": str(emulator.ca_file.resolve()),
            "subscription": DEFAULT_SUBSCRIPTION,
        }
        (options.state_dir / "endpoint.json").write_text(json.dumps(details, indent=2) + "\n")
        for key, value in details.items():
            sys.stdout.write(f"{key}={value}\n")
        sys.stdout.flush()
        stop.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
