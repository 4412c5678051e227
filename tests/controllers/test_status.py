"""`nodewright status`: rollouts, IP pools per node pool and identity assignments from the CRs'
status, rendered for a human; and the command against a real API server."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

from nodewright.controllers.status import StatusView, node_image_line, pool_lines, read_view, render, summary
from nodewright.devenv.crds import install_crds
from nodewright.runtime import errors
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import NODE, Kind
from tests.conftest import Cluster

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "config" / "samples" / "reference"


def node_image(up_to_date: int, total: int, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "workers"},
        "spec": {"image": "/CommunityGalleries/g/images/node/versions/2.0.0"},
        "status": {"upToDateNodes": up_to_date, "totalNodes": total, **status},
    }


def test_rollout_line_shows_progress_replacements_and_failing_conditions() -> None:
    """A half-done rollout: a bar at half, the donors being replaced, and a condition not True."""
    image = node_image(
        2,
        4,
        donors=[{"name": "a"}],
        pending=[{"name": "p"}],
        budget=1,
        conditions=[
            {"type": "Available", "status": "True"},
            {"type": "Degraded", "status": "False", "message": "node x has no providerID"},
        ],
    )
    text = render(StatusView(node_images=[node_image_line(image)]))
    assert "workers" in text
    assert "[##########----------] 2/4 on 2.0.0  replacing 1  pending 1  budget 1" in text
    assert "! Degraded=False: node x has no providerID" in text
    assert "Available" not in text


def test_rollout_line_shows_the_canary_batch_and_soak() -> None:
    """The rollout's stage from status: state, canary, a batch under way and the soak's end."""
    soaking = node_image(
        1, 4, rolloutState="Soaking", canaryPassed=False, batchInFlight=True, soakUntil="2026-11-30T23:00:00Z"
    )
    text = render(StatusView(node_images=[node_image_line(soaking)]))
    assert "[Soaking, canary, batch under way, soaking until 2026-11-30T23:00:00Z]" in text
    done = render(StatusView(node_images=[node_image_line(node_image(4, 4, rolloutState="Complete"))]))
    assert "[Complete]" in done


def test_pools_group_node_network_configs_by_the_nodes_agent_pool() -> None:
    """Allocated IPs, requested and pending release add up per node pool; unfilled nodes count."""
    nodes = [
        {"metadata": {"name": n, "labels": {"kubernetes.azure.com/agentpool": p}}}
        for n, p in (("a0", "user"), ("a1", "user"), ("s0", "system"))
    ]

    def config(name: str, requested: int, allocated: int, not_in_use: int = 0) -> dict[str, Any]:
        return {
            "metadata": {"name": name},
            "spec": {"requestedIPCount": requested, "ipsNotInUse": [str(i) for i in range(not_in_use)]},
            "status": {
                "networkContainers": [{"ipAssignments": [{"name": str(i)} for i in range(allocated)]}]
            },
        }

    pools = pool_lines([config("a0", 16, 16, 2), config("a1", 16, 4), config("s0", 8, 8)], nodes)
    assert [(p.pool, p.nodes, p.allocated, p.requested, p.not_in_use, p.filling) for p in pools] == [
        ("system", 1, 8, 8, 0, 0),
        ("user", 2, 20, 32, 2, 1),
    ]
    view = StatusView(pools=pools)
    assert "allocated 20/32 requested  pending release 2  nodes 2 (1 filling)" in render(view)
    assert "ip pools 2/3 filled (28 NIC IPs)" in summary(view)


def test_unreadable_sections_say_why_instead_of_none() -> None:
    """A kind that cannot be listed is named with the reason, not shown as empty."""
    text = render(StatusView(unavailable={"node images": "Forbidden"}))
    assert "(node images: Forbidden)" in text
    assert text.count("(none)") == 1  # the IP pools are really empty


def apply_reference(client: Client, file: str, kind: Kind, namespace: str, name: str, **changes: Any) -> None:
    document = yaml.safe_load((REFERENCE / file).read_text())
    status = document.pop("status", None)
    document["metadata"] = {**document["metadata"], "name": name, "namespace": namespace}
    document["spec"].update(changes)
    created = client.create(kind, document, namespace)
    if status is not None:
        client.update_status(kind, {**created, "status": status})


def test_status_command_reads_the_real_api_server(cluster: Cluster, namespace: str) -> None:
    """`nodewright status` shows an identity failure and a pool from objects on the API server."""
    client = Client.from_kubeconfig(cluster.kubeconfig)
    install_crds(client)
    assigned = Kind("aadpodidentity.k8s.io/v1", "AzureAssignedIdentity", "azureassignedidentities")
    network_config = Kind("acn.azure.com/v1alpha", "NodeNetworkConfig", "nodenetworkconfigs")
    node = f"status-{uuid.uuid4().hex[:8]}"
    client.create(NODE, {"metadata": {"name": node, "labels": {"kubernetes.azure.com/agentpool": "pool-x"}}})
    try:
        apply_reference(client, "aadpodidentity_v1_azureassignedidentity.yaml", assigned, namespace, "ok")
        failed = yaml.safe_load((REFERENCE / "aadpodidentity_v1_azureassignedidentity.yaml").read_text())
        apply_reference(
            client, "aadpodidentity_v1_azureassignedidentity.yaml", assigned, namespace, "bad", nodename=node
        )
        current = client.get(assigned, "bad", namespace)
        client.update_status(assigned, {**current, "status": {**failed["status"], "status": "AssignFailed"}})
        apply_reference(client, "acn_v1alpha_nodenetworkconfig.yaml", network_config, namespace, node)
        view = read_view(client, namespace)
        assert f"{namespace}/bad: AssignFailed (identity web-identity, node {node})" in view.identity_failures
        result = subprocess.run(
            [sys.executable, "-m", "nodewright.controllers.main", "status", "--namespace", namespace],
            cwd=ROOT,
            env={"KUBECONFIG": str(cluster.kubeconfig), "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        assert f"! {namespace}/bad: AssignFailed (identity web-identity, node {node})" in result.stdout
        assert "pool-x" in result.stdout
    finally:
        with contextlib.suppress(errors.NotFound):
            client.delete(NODE, node)


def test_watch_redraws_until_interrupted(cluster: Cluster) -> None:
    """`nodewright status --watch` redraws every interval and exits 0 on Ctrl-C. The child gets
    the default SIGINT disposition: a suite started in the background by a shell without job
    control inherits SIGINT ignored, and Python then leaves it ignored (the command would run on)."""
    watcher = subprocess.Popen(
        [sys.executable, "-m", "nodewright.controllers.main", "status", "--watch", "--interval", "0.5"],
        cwd=ROOT,
        env={"KUBECONFIG": str(cluster.kubeconfig), "PATH": "/usr/bin:/bin"},
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509
    )
    with watcher:  # killed and reaped if an assertion fails, so no later test meets it
        assert watcher.stdout is not None
        frames = 0
        deadline = time.monotonic() + 60
        while frames < 3 and time.monotonic() < deadline:
            line = watcher.stdout.readline()
            frames += line.rstrip().endswith("nodewright status")
        watcher.send_signal(signal.SIGINT)
        try:
            rest, _ = watcher.communicate(timeout=30)
        finally:
            watcher.kill()
    assert frames == 3
    assert watcher.returncode == 0, rest
