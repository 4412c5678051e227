"""bench: nodewright's side-by-side benchmarks against kopf, controller-runtime and client-go.

``python -m bench`` (``make bench``) runs everything on a private local control plane and
prints every figure; ``--full`` uses the full sizes. The pieces: ``workload`` (the Widget CRD
and the Pod specs), ``kube`` (the harness's own API access), ``processes`` (running one
contender and accounting its CPU and memory), ``widgets`` (the reconcile benchmark),
``cache_memory``, ``workqueue``, ``report`` (tables, JSON, chart) and ``contenders/`` plus
``peers/`` (the programs measured).

Beside them, the reconcilers' and the Azure layer's own benches (``identity``, ``ipam``,
``nodeimage``, ``budget``, ``storm``, ``storm_manager``), the whole manager at cluster sizes
(``scale``, with ``scale_cluster``, ``scale_world``, ``scale_tracker``, ``scale_config``,
``scale_figures`` and ``scale_report``) and the framework's reconciles per core
(``reconcile_rate``).
"""
