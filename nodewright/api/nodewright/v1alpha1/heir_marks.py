"""The marks a node image rollout leaves where IPAM can read them before a heir is paired: the
donor annotation on a paired heir and the scale-out record on a ScalingGroup.

The NodeImage reconciler writes both; the node-network-config reconciler reads them (with the
rollout's Join PendingNodes) to tell a new Node that is about to become a heir, whose pool it
sizes once, with the donor's pods, from a Node it sizes at once (``incoming_pods`` says why).
Pure constants; imports nothing internal.
"""

from __future__ import annotations

__all__ = ["DONOR_ANNOTATION", "SCALE_OUT_ANNOTATION"]

DONOR_ANNOTATION = "nodewright.io/donor"
"""On a heir: the name of the outdated node it replaces. Written in one patch with the heir's
``nodewright.io/incoming-pods`` announcement, so a Node that carries it is announced already."""

SCALE_OUT_ANNOTATION = "nodewright.io/instances-before-scale-out"
"""On a ScalingGroup while a scale-out is under way: the scale set's instance IDs before it (a
JSON list), written before the capacity changes and cleared once the new machine has its Join
PendingNode. A restart finds the new machine by difference; IPAM knows an instance not listed is
the rollout's."""
