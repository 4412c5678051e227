"""The ``nodewright`` command: the composition root where configuration, registry and manager meet.

Owns ``main()``: ``nodewright run --config FILE [--kubeconfig PATH]`` runs the manager with the
reconcilers the config enables; ``nodewright check-config FILE`` validates a config without
touching a cluster; ``nodewright status [--watch]`` shows what the reconcilers did (``status.py``);
``nodewright version`` prints the version. A bad config exits with code 2
and one line on stderr. ``REGISTRY`` is where our own reconcilers are registered by name.
Each reconciler reaches Azure through its manager's clouds (``cloud_access.clouds_of``), whose
write guard is that manager's leadership fence, so API and ARM writes alike are refused by one
fence when this replica may not lead.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from nodewright.controllers import federation, identity, node_image, node_network_config
from nodewright.controllers.status import main_status
from nodewright.controllers.status_metrics import register_status_metrics
from nodewright.runtime import (
    RUNTIME_RULES,
    ApiError,
    ConfigError,
    Manager,
    ManagerConfig,
    ManagerError,
    PolicyRule,
    ReconcilerPlugin,
    ReconcilerRegistry,
    RegistryError,
    load_config,
    logs,
    missing_permissions,
)

__all__ = ["BUILT_IN_RECONCILERS", "REGISTRY", "main", "required_rules"]

BUILT_IN_RECONCILERS: tuple[ReconcilerPlugin, ...] = (
    identity.PLUGIN,
    node_image.PLUGIN,
    node_network_config.PLUGIN,
    federation.PLUGIN,
)
"""Our reconcilers' plug-ins (``make manifests`` writes config/rbac from their ``rbac_rules``)."""

REGISTRY = ReconcilerRegistry()
"""Our reconcilers by name (config enables them: ``reconcilers: {identity-assignment: {...}}``)."""
for _plugin in BUILT_IN_RECONCILERS:
    REGISTRY.register(_plugin)

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
    status = commands.add_parser("status", help="show rollouts, IP pools and identity assignments")
    status.add_argument("--watch", action="store_true", help="refresh every --interval seconds")
    status.add_argument("--interval", type=float, default=2.0, metavar="S", help="refresh period (default 2)")
    status.add_argument("--namespace", default="kube-system", help="where NodeNetworkConfigs live")
    status.add_argument("--kubeconfig", metavar="PATH", help="kubeconfig (default: $KUBECONFIG, in-cluster)")
    return parser


def _validate_options(path: str, name: str, plugin: ReconcilerPlugin, options: Mapping[str, Any]) -> None:
    """Run the plug-in's ``validate_options(options)``, if it declares one, so that
    check-config and run catch bad options before touching a cluster."""
    if plugin.validate_options is None:
        return
    try:
        plugin.validate_options(options)
    except ConfigError as error:
        raise ConfigError(f"{path}: reconcilers.{name}.{error}") from None


def required_rules(config: ManagerConfig) -> dict[str, list[PolicyRule]]:
    """What each enabled part needs, by who needs it: the runtime (Events, the Lease, metrics
    authorization) and every enabled reconciler whose plug-in declares rules."""
    runtime = list(RUNTIME_RULES)
    if config.leader_election.enabled:
        lease = ("get", "create", "update")
        runtime.append(
            PolicyRule("coordination.k8s.io", ("leases",), lease, namespace=config.leader_election.namespace)
        )
    if config.metrics.secure and config.metrics.bind_address != "0":
        runtime.append(PolicyRule("authentication.k8s.io", ("tokenreviews",), ("create",)))
        runtime.append(PolicyRule("authorization.k8s.io", ("subjectaccessreviews",), ("create",)))
    rules = {"the runtime (config/rbac)": runtime}
    for name, reconciler in config.reconcilers.items():
        if not reconciler.enabled:
            continue
        declared = REGISTRY.resolve(name, reconciler.module).rbac_rules
        if declared:
            rules[f"reconciler {name} (is its role bound? config/rbac/reconcilers/{name})"] = list(declared)
    return rules


def _fail(code: int, message: str) -> int:
    print(f"nodewright: {message}", file=sys.stderr)  # noqa: T201 - the CLI's error channel
    return code


def main(argv: Sequence[str] | None = None) -> int:
    arguments = _parser().parse_args(argv)
    if arguments.command == "version":
        print(_version())  # noqa: T201 - the command's output
        return 0
    if arguments.command == "status":
        return main_status(arguments)
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
    register_status_metrics(manager)  # what `nodewright status` shows, from the same caches
    try:
        problems = missing_permissions(manager.client, required_rules(config))
    except ApiError as error:
        return _fail(EXIT_FAILURE, f"cannot check permissions: {error}")
    if problems:
        return _fail(EXIT_FAILURE, "missing permissions: " + "; ".join(problems))
    try:
        manager.run()
    except ManagerError as error:
        return _fail(EXIT_FAILURE, str(error))
    return 0


if __name__ == "__main__":
    sys.exit(main())
