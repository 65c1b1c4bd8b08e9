"""The broker's Prometheus metrics (``metrics.http.listener``; names and meanings in
docs/metrics.md).

Two kinds of figures, kept apart so the hot path pays almost nothing:

* counts the request path records as it goes (:mod:`broker.request_metrics`: plain int
  increments on the event loop thread, no lock, nothing of prometheus_client);
* state read when Prometheus scrapes (:mod:`broker.metrics.registry`'s
  ``STATE_COLLECTORS``: partition counts, the controller's view, purgatory sizes, the
  ZooKeeper session, ...), read on the event loop thread by the scrape's collector.

:mod:`broker.metrics.endpoint` serves both with prometheus_client's HTTP server.
"""
