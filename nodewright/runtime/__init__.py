"""runtime: a controller-runtime for Python.

Knows Kubernetes in general and nothing of Azure or our custom resources. Five subpackages, each
layer importing only the ones below it (``make lint`` checks it):

- ``process``: the ``Manager``, its config, the plug-in registry, RBAC, leader election, ``/metrics``;
- ``control``: the reconcile contract, predicates, handlers, sources, the work queue, the controller;
- ``informers``: informers, their stores and the shared cache;
- ``kube``: the API client, its transport, errors, kinds, object helpers and Events;
- ``observe``: logs, metrics, tracing and health probes.

This package is the reconcilers' one import path: ``nodewright/controllers`` and user plug-ins
import ``from nodewright.runtime import ...`` and never a subpackage (import-linter enforces it for
the controllers). ``__all__`` is what they use: the names below, grouped by where they live.
"""

from nodewright.runtime.control.builder import Builder
from nodewright.runtime.control.controller import Controller
from nodewright.runtime.control.fan_out import FanOut
from nodewright.runtime.control.handlers import (
    Handler,
    enqueue_for_object,
    enqueue_mapped,
    enqueue_owner,
    request_for,
)
from nodewright.runtime.control.predicates import (
    Predicate,
    and_,
    annotations_changed,
    generation_changed,
    labels_changed,
    not_,
    or_,
    predicate,
    resource_version_changed,
)
from nodewright.runtime.control.ratelimit import RateLimiter, default_controller_rate_limiter
from nodewright.runtime.control.reconcile import Reconciler, Request, Result, TerminalError
from nodewright.runtime.control.sources import ChannelSource, PollingSource, Source
from nodewright.runtime.control.workqueue import BatchWindow
from nodewright.runtime.informers.cache import (
    NAMESPACE_INDEX,
    Cache,
    StoreReader,
    field_indexer,
    label_selector_matcher,
)
from nodewright.runtime.informers.cache_view import CacheView, InformerView
from nodewright.runtime.informers.informer import Informer, Store, object_key
from nodewright.runtime.informers.recent_writes import RecentWrites
from nodewright.runtime.kube import errors
from nodewright.runtime.kube.client import Client, ObjectList
from nodewright.runtime.kube.errors import ApiError
from nodewright.runtime.kube.events import EventRecorder, EventType
from nodewright.runtime.kube.fence import guard_session
from nodewright.runtime.kube.kinds import (
    CONFIG_MAP,
    EVENT,
    LEASE,
    NAMESPACE,
    NODE,
    POD,
    POD_DISRUPTION_BUDGET,
    SECRET,
    Kind,
)
from nodewright.runtime.kube.labels import label_value_problem, shown
from nodewright.runtime.kube.objects import (
    add_finalizer,
    condition_is_true,
    controller_of,
    drop_finalizer,
    ensure_finalizer,
    get_condition,
    remove_finalizer,
    replace_status,
    set_condition,
    set_controller_reference,
)
from nodewright.runtime.kube.retry import retry_on_conflict
from nodewright.runtime.kube.times import format_time, now_text, parse_time
from nodewright.runtime.observe import logs, tracing
from nodewright.runtime.observe.logs import get_logger
from nodewright.runtime.observe.metrics import Metrics
from nodewright.runtime.process.config import ConfigError, ManagerConfig, load_config
from nodewright.runtime.process.manager import Manager, ManagerError
from nodewright.runtime.process.permissions import missing_permissions
from nodewright.runtime.process.rbac import RUNTIME_RULES, PolicyRule, merge_rules
from nodewright.runtime.process.registry import ReconcilerPlugin, ReconcilerRegistry, RegistryError
from nodewright.runtime.process.services import ServiceKey

__all__ = [
    "CONFIG_MAP",
    "EVENT",
    "LEASE",
    "NAMESPACE",
    "NAMESPACE_INDEX",
    "NODE",
    "POD",
    "POD_DISRUPTION_BUDGET",
    "RUNTIME_RULES",
    "SECRET",
    "ApiError",
    "BatchWindow",
    "Builder",
    "Cache",
    "CacheView",
    "ChannelSource",
    "Client",
    "ConfigError",
    "Controller",
    "EventRecorder",
    "EventType",
    "FanOut",
    "Handler",
    "Informer",
    "InformerView",
    "Kind",
    "Manager",
    "ManagerConfig",
    "ManagerError",
    "Metrics",
    "ObjectList",
    "PolicyRule",
    "PollingSource",
    "Predicate",
    "RateLimiter",
    "RecentWrites",
    "Reconciler",
    "ReconcilerPlugin",
    "ReconcilerRegistry",
    "RegistryError",
    "Request",
    "Result",
    "ServiceKey",
    "Source",
    "Store",
    "StoreReader",
    "TerminalError",
    "add_finalizer",
    "and_",
    "annotations_changed",
    "condition_is_true",
    "controller_of",
    "default_controller_rate_limiter",
    "drop_finalizer",
    "enqueue_for_object",
    "enqueue_mapped",
    "enqueue_owner",
    "ensure_finalizer",
    "errors",
    "field_indexer",
    "format_time",
    "generation_changed",
    "get_condition",
    "get_logger",
    "guard_session",
    "label_selector_matcher",
    "label_value_problem",
    "labels_changed",
    "load_config",
    "logs",
    "merge_rules",
    "missing_permissions",
    "not_",
    "now_text",
    "object_key",
    "or_",
    "parse_time",
    "predicate",
    "remove_finalizer",
    "replace_status",
    "request_for",
    "resource_version_changed",
    "retry_on_conflict",
    "set_condition",
    "set_controller_reference",
    "shown",
    "tracing",
]
