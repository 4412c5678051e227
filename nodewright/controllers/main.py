"""The ``nodewright`` command: the composition root where configuration, registry and manager meet.

Owns ``main()``: ``nodewright run --config FILE [--kubeconfig PATH]`` runs the manager with the
reconcilers the config enables; ``nodewright check-config FILE`` validates a config without
touching a cluster; ``nodewright version`` prints the version. A bad config exits with code 2
and one line on stderr. ``REGISTRY`` is where our own reconcilers are registered by name.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any

from nodewright.controllers import federation, identity, node_image, node_network_config
from nodewright.runtime import logs
from nodewright.runtime.config import ConfigError, load_config
from nodewright.runtime.manager import Manager, ManagerError
from nodewright.runtime.registry import ReconcilerRegistry, RegistryError

__all__ = ["BUILT_IN_RECONCILERS", "REGISTRY", "main"]

BUILT_IN_RECONCILERS: tuple[ModuleType, ...] = (identity, node_image, node_network_config, federation)
"""Our reconciler modules: each has ``NAME``, ``setup``, ``validate_options`` and ``RBAC_RULES``
(from which ``make manifests`` writes config/rbac)."""

REGISTRY = ReconcilerRegistry()
"""Our reconcilers by name (config enables them: ``reconcilers: {identity-assignment: {...}}``)."""
for _module in BUILT_IN_RECONCILERS:
    REGISTRY.register(_module.NAME, _module)

EXIT_CONFIG = 2
EXIT_FAILURE = 1


def _version() -> str:
    try:
        return importlib.metadata.version("nodewright")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nodewright", description="Kubernetes node operator for Azure.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = commands.add_parser("run", help="run the manager", description="Run the manager.")
    run.add_argument("--config", required=True, metavar="FILE", help="manager config (YAML)")
    run.add_argument("--kubeconfig", metavar="PATH", help="kubeconfig (default: $KUBECONFIG, in-cluster)")
    check = commands.add_parser(
        "check-config", help="validate a config file", description="Validate a config file and exit."
    )
    check.add_argument("file", metavar="FILE")
    commands.add_parser("version", help="print the version", description="Print the version.")
    return parser


def _validate_options(path: str, name: str, setup: Callable[..., Any], options: Mapping[str, Any]) -> None:
    """Run the reconciler module's ``validate_options(options)``, if it has one, so that
    check-config and run catch bad options before touching a cluster."""
    validate = getattr(sys.modules.get(getattr(setup, "__module__", "")), "validate_options", None)
    if callable(validate):
        try:
            validate(options)
        except ConfigError as error:
            raise ConfigError(f"{path}: reconcilers.{name}.{error}") from None


def _fail(code: int, message: str) -> int:
    print(f"nodewright: {message}", file=sys.stderr)  # noqa: T201 - the CLI's error channel
    return code


def main(argv: Sequence[str] | None = None) -> int:
    arguments = _parser().parse_args(argv)
    if arguments.command == "version":
        print(_version())  # noqa: T201 - the command's output
        return 0
    path = arguments.file if arguments.command == "check-config" else arguments.config
    try:
        config = load_config(path)
        for name, reconciler in config.reconcilers.items():  # fail before touching a cluster
            if reconciler.enabled:
                _validate_options(path, name, REGISTRY.resolve(name, reconciler.module), reconciler.options)
    except ConfigError as error:
        return _fail(EXIT_CONFIG, str(error))
    except RegistryError as error:
        return _fail(EXIT_CONFIG, f"{path}: reconcilers: {error}")
    if arguments.command == "check-config":
        print(f"{path}: ok")  # noqa: T201
        return 0
    logs.configure(config.logging.level, config.logging.format)
    try:
        manager = Manager(config, kubeconfig=arguments.kubeconfig)
    except Exception as error:
        return _fail(EXIT_FAILURE, f"cannot build the API client: {error}")
    try:
        manager.setup_reconcilers(REGISTRY)
    except ConfigError as error:
        return _fail(EXIT_CONFIG, f"{path}: {error}")
    try:
        manager.run()
    except ManagerError as error:
        return _fail(EXIT_FAILURE, str(error))
    return 0


if __name__ == "__main__":
    sys.exit(main())
