"""control: from watch events to reconcile calls.

Owns the reconcile contract (``reconcile``: ``Request``, ``Result``, ``TerminalError``), the
filters and mappings from an event to work-queue keys (``predicates``, ``handlers``, ``sources``),
the rate-limited, batching work queue (``workqueue``, ``ratelimit``), the ``Controller`` whose
workers drain it through a reconciler (``controller``), the fluent ``Builder`` that wires one
(``builder``) and ``FanOut`` for a pass that writes many objects at once (``fan_out``). Reads
through ``informers``, writes through ``kube``; the process around it is ``process``'s.
"""

__all__: list[str] = []
