"""The benchmark workload: the Widget CRD, Widget bodies, realistic Pod bodies, and the test
for "converged".

Widgets (``bench.nodewright.io/v1alpha1``, namespaced, status subresource) are what every
reconcile contender reconciles: it must set ``status.observedGeneration`` to
``metadata.generation`` and a ``Ready`` condition with status ``True``. Pods are what the
cache-memory benchmark caches. Nothing here does I/O.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "WIDGET_API_VERSION",
    "WIDGET_GROUP",
    "WIDGET_PLURAL",
    "is_converged",
    "pod_body",
    "ready_status",
    "widget_body",
    "widget_crd",
]

WIDGET_GROUP = "bench.nodewright.io"
WIDGET_API_VERSION = f"{WIDGET_GROUP}/v1alpha1"
WIDGET_PLURAL = "widgets"


def widget_crd() -> dict[str, Any]:
    """The Widget CustomResourceDefinition (structural schema, status subresource)."""
    condition = {
        "type": "object",
        "required": ["type", "status"],
        "properties": {
            "type": {"type": "string"},
            "status": {"type": "string"},
            "reason": {"type": "string"},
            "message": {"type": "string"},
            "observedGeneration": {"type": "integer"},
            "lastTransitionTime": {"type": "string", "format": "date-time"},
        },
    }
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "size": {"type": "integer"},
                    "color": {"type": "string"},
                },
            },
            "status": {
                "type": "object",
                "properties": {
                    "observedGeneration": {"type": "integer"},
                    "conditions": {"type": "array", "items": condition},
                },
            },
        },
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{WIDGET_PLURAL}.{WIDGET_GROUP}"},
        "spec": {
            "group": WIDGET_GROUP,
            "scope": "Namespaced",
            "names": {
                "plural": WIDGET_PLURAL,
                "singular": "widget",
                "kind": "Widget",
                "listKind": "WidgetList",
            },
            "versions": [
                {
                    "name": "v1alpha1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": {"status": {}},
                }
            ],
        },
    }


def widget_body(name: str, index: int) -> dict[str, Any]:
    """One Widget with a small spec."""
    colors = ("red", "green", "blue", "yellow")
    return {
        "apiVersion": WIDGET_API_VERSION,
        "kind": "Widget",
        "metadata": {"name": name, "labels": {"bench.nodewright.io/batch": name.rsplit("-", 1)[0]}},
        "spec": {"size": index % 97, "color": colors[index % len(colors)]},
    }


def ready_status(generation: int, now: str) -> dict[str, Any]:
    """The status every contender writes (``now`` is an RFC 3339 timestamp)."""
    return {
        "status": {
            "observedGeneration": generation,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "Reconciled",
                    "message": "Widget reconciled",
                    "observedGeneration": generation,
                    "lastTransitionTime": now,
                }
            ],
        }
    }


def is_converged(obj: dict[str, Any]) -> bool:
    """observedGeneration equals generation and a Ready condition is True."""
    metadata = obj.get("metadata") or {}
    status = obj.get("status") or {}
    if status.get("observedGeneration") != metadata.get("generation"):
        return False
    return any(
        condition.get("type") == "Ready" and condition.get("status") == "True"
        for condition in status.get("conditions") or ()
    )


def pod_body(name: str, index: int) -> dict[str, Any]:
    """A Pod shaped like a real workload's: three containers (app, sidecar, init), env vars,
    resources, probes, labels and annotations, volumes (configMap, secret, emptyDir,
    projected service-account token), tolerations and affinity."""
    app = f"shop-{index % 40}"
    labels = {
        "app.kubernetes.io/name": app,
        "app.kubernetes.io/instance": f"{app}-prod",
        "app.kubernetes.io/version": f"1.{index % 7}.{index % 13}",
        "app.kubernetes.io/component": ("api", "worker", "frontend")[index % 3],
        "app.kubernetes.io/part-of": "shop",
        "pod-template-hash": f"{(index * 2654435761) % 16**10:010x}",
    }
    env = [
        {"name": "LOG_LEVEL", "value": "info"},
        {"name": "PORT", "value": "8080"},
        {"name": "DATABASE_URL", "value": f"postgres://{app}.db.svc.cluster.local:5432/{app}"},
        {"name": "FEATURE_FLAGS", "value": "checkout-v2,search-ranking,fast-cart"},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {
            "name": "API_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": f"{app}-secrets", "key": "api-token"}},
        },
    ]
    mounts = [
        {"name": "config", "mountPath": "/etc/app", "readOnly": True},
        {"name": "secrets", "mountPath": "/var/run/secrets/app", "readOnly": True},
        {"name": "cache", "mountPath": "/var/cache/app"},
        {"name": "token", "mountPath": "/var/run/secrets/tokens", "readOnly": True},
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {
                "prometheus.io/scrape": "true",
                "prometheus.io/port": "9090",
                "kubectl.kubernetes.io/default-container": "app",
            },
        },
        "spec": {
            "initContainers": [
                {
                    "name": "migrate",
                    "image": f"registry.example.com/shop/{app}-migrations:1.{index % 7}",
                    "command": ["/bin/migrate", "--wait-for-db", "--timeout=120s"],
                    "env": env[:3],
                    "resources": {
                        "requests": {"cpu": "50m", "memory": "64Mi"},
                        "limits": {"cpu": "200m", "memory": "128Mi"},
                    },
                }
            ],
            "containers": [
                {
                    "name": "app",
                    "image": f"registry.example.com/shop/{app}:1.{index % 7}.{index % 13}",
                    "args": ["--config=/etc/app/config.yaml", "--listen=:8080"],
                    "ports": [
                        {"name": "http", "containerPort": 8080, "protocol": "TCP"},
                        {"name": "metrics", "containerPort": 9090, "protocol": "TCP"},
                    ],
                    "env": env,
                    "resources": {
                        "requests": {"cpu": "250m", "memory": "256Mi"},
                        "limits": {"cpu": "1", "memory": "512Mi"},
                    },
                    "readinessProbe": {
                        "httpGet": {"path": "/healthz", "port": 8080},
                        "periodSeconds": 5,
                    },
                    "livenessProbe": {
                        "httpGet": {"path": "/livez", "port": 8080},
                        "initialDelaySeconds": 10,
                        "periodSeconds": 10,
                    },
                    "volumeMounts": mounts,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "readOnlyRootFilesystem": True,
                        "allowPrivilegeEscalation": False,
                    },
                },
                {
                    "name": "proxy",
                    "image": "registry.example.com/mesh/proxy:1.24.3",
                    "args": ["proxy", "sidecar", "--concurrency=2"],
                    "ports": [{"name": "mesh", "containerPort": 15001, "protocol": "TCP"}],
                    "env": env[4:6],
                    "resources": {
                        "requests": {"cpu": "100m", "memory": "128Mi"},
                        "limits": {"cpu": "500m", "memory": "256Mi"},
                    },
                    "volumeMounts": mounts[3:],
                },
            ],
            "volumes": [
                {"name": "config", "configMap": {"name": f"{app}-config"}},
                {"name": "secrets", "secret": {"secretName": f"{app}-secrets"}},
                {"name": "cache", "emptyDir": {"sizeLimit": "1Gi"}},
                {
                    "name": "token",
                    "projected": {
                        "sources": [
                            {
                                "serviceAccountToken": {
                                    "path": "token",
                                    "audience": "shop",
                                    "expirationSeconds": 3600,
                                }
                            }
                        ]
                    },
                },
            ],
            "tolerations": [
                {"key": "workload", "operator": "Equal", "value": "shop", "effect": "NoSchedule"}
            ],
            "affinity": {
                "podAntiAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 100,
                            "podAffinityTerm": {
                                "labelSelector": {"matchLabels": {"app.kubernetes.io/name": app}},
                                "topologyKey": "kubernetes.io/hostname",
                            },
                        }
                    ]
                }
            },
            "terminationGracePeriodSeconds": 30,
            "serviceAccountName": app,
        },
    }
