"""What each of the three node image reconcilers is built with, declared once.

``Collaborators`` bundles the API client, the cloud (narrowed by each reconciler to the
operations it declares), the standalone-VM cloud, the Event recorder, the settings, the
manager's metrics, the checkpoint hook and the clock; ``install`` builds one and hands it to
``NodeImageReconciler``, ``ScalingGroupReconciler`` and ``PendingNodeReconciler``, whose common
base ``WithCollaborators`` keeps them as ``self._client``, ``self._cloud`` and so on. No I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from nodewright.controllers.node_image.options import NodeImageSettings
from nodewright.controllers.node_image.resources import Checkpoint, Clock, no_checkpoint, utc_now
from nodewright.controllers.node_image.standalone import StandaloneCloud
from nodewright.runtime import Client, EventRecorder, Metrics

__all__ = ["Collaborators", "WithCollaborators"]

CloudT_co = TypeVar("CloudT_co", covariant=True)


@dataclass(frozen=True)
class Collaborators(Generic[CloudT_co]):
    """A reconciler's collaborators; ``cloud`` is typed by the operations it needs."""

    client: Client
    cloud: CloudT_co
    standalone: StandaloneCloud
    events: EventRecorder
    settings: NodeImageSettings
    metrics: Metrics
    checkpoint: Checkpoint = no_checkpoint
    clock: Clock = utc_now


class WithCollaborators(Generic[CloudT_co]):
    """Base of the three reconcilers: their collaborators as private attributes."""

    def __init__(self, collaborators: Collaborators[CloudT_co]) -> None:
        self._client = collaborators.client
        self._cloud: CloudT_co = collaborators.cloud
        self._standalone = collaborators.standalone
        self._events = collaborators.events
        self._settings = collaborators.settings
        self._checkpoint = collaborators.checkpoint
        self._clock = collaborators.clock
