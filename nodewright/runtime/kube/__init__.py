"""kube: talking to the Kubernetes API server, one request at a time.

Owns the typed ``Client`` (``client``) and what lies under it: who we are (``credentials``), the
connection pools (``transport``, ``http1``), the watch stream and paginated lists
(``watch_stream``, ``list_pager``), the typed errors the server answers with (``errors``) and the
write fence every mutating request passes first (``fence``; the leader elector in ``process`` feeds
it). Also the shapes every object shares and the small writes built on the client: resource kinds
(``kinds``), owner references, finalizers and conditions (``objects``), ``retry_on_conflict``
(``retry``), API time formats (``times``), label syntax (``labels``) and Event recording
(``events``). Nothing here caches or schedules work: that is ``informers`` and ``control``.
"""

__all__: list[str] = []
