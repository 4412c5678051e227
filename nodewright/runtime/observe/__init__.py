"""observe: how a running process is seen from outside, and nothing it acts on.

Owns structured logs (``logs``), the per-manager Prometheus registry and the OpenTelemetry meters
that write into it (``metrics``, with the cheap hot-path series of ``series``), the tracer provider
(``tracing``) and the ``/healthz`` and ``/readyz`` probe server (``health``). The bottom layer of the
runtime: it knows no Kubernetes object, so every other subpackage may use it. Serving ``/metrics``
behind the API server's authorization needs the client and lives in ``process``.
"""

__all__: list[str] = []
