"""runtime: a controller-runtime for Python.

Knows Kubernetes in general and nothing of Azure or our custom resources. Public surface is
re-exported here as modules land.
"""

from nodewright.runtime.builder import Builder
from nodewright.runtime.cache import Cache, field_indexer
from nodewright.runtime.cache_view import CacheView
from nodewright.runtime.client import Client, ObjectList
from nodewright.runtime.config import ConfigError, ManagerConfig, load_config
from nodewright.runtime.controller import Controller
from nodewright.runtime.events import EventRecorder
from nodewright.runtime.fence import FencedWriteError, WriteFence
from nodewright.runtime.handlers import Handler, enqueue_for_object, enqueue_mapped, enqueue_owner
from nodewright.runtime.health import HealthServer
from nodewright.runtime.informer import EventHandler, Informer, Store, object_key
from nodewright.runtime.kinds import Kind
from nodewright.runtime.leaderelection import LeaderElector
from nodewright.runtime.manager import Manager
from nodewright.runtime.metrics import Metrics
from nodewright.runtime.predicates import (
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
from nodewright.runtime.ratelimit import RateLimiter, default_controller_rate_limiter
from nodewright.runtime.rbac import PolicyRule
from nodewright.runtime.recent_writes import OwnWrites, RecentWrites
from nodewright.runtime.reconcile import Reconciler, Request, Result, TerminalError
from nodewright.runtime.registry import ReconcilerPlugin, ReconcilerRegistry
from nodewright.runtime.retry import DEFAULT_BACKOFF, DEFAULT_RETRY, retry_on_conflict
from nodewright.runtime.services import ServiceKey, Services
from nodewright.runtime.sources import PollingSource, Source
from nodewright.runtime.workqueue import BatchWindow, WorkQueue

__all__ = [
    "DEFAULT_BACKOFF",
    "DEFAULT_RETRY",
    "BatchWindow",
    "Builder",
    "Cache",
    "CacheView",
    "Client",
    "ConfigError",
    "Controller",
    "EventHandler",
    "EventRecorder",
    "FencedWriteError",
    "Handler",
    "HealthServer",
    "Informer",
    "Kind",
    "LeaderElector",
    "Manager",
    "ManagerConfig",
    "Metrics",
    "ObjectList",
    "OwnWrites",
    "PolicyRule",
    "PollingSource",
    "Predicate",
    "RateLimiter",
    "RecentWrites",
    "Reconciler",
    "ReconcilerPlugin",
    "ReconcilerRegistry",
    "Request",
    "Result",
    "ServiceKey",
    "Services",
    "Source",
    "Store",
    "TerminalError",
    "WorkQueue",
    "WriteFence",
    "and_",
    "annotations_changed",
    "default_controller_rate_limiter",
    "enqueue_for_object",
    "enqueue_mapped",
    "enqueue_owner",
    "field_indexer",
    "generation_changed",
    "labels_changed",
    "load_config",
    "not_",
    "object_key",
    "or_",
    "predicate",
    "resource_version_changed",
    "retry_on_conflict",
]
