"""``millrace console``: a small web console for a Millrace (or any Kafka) cluster.

A Starlette app served by uvicorn, with Jinja2 templates rendered on the server, plain HTML
forms and one CSS file (no JavaScript framework). Everything it shows comes from the live
cluster over the Kafka protocol (confluent-kafka's AdminClient and Consumer, and the
``millrace`` tools' own protocol clients where confluent-kafka has no API) and, when
``cluster.json`` names them, from the brokers' Prometheus endpoints.

Modules: :mod:`.command` (the subcommand), :mod:`.app` (routes), :mod:`.cluster_source`
(cluster, topics, offsets, configs), :mod:`.messages` (browsing a partition),
:mod:`.group_source`, :mod:`.txn_source`, :mod:`.sinks`, :mod:`.prometheus` (scraping),
:mod:`.history` (the background sampler) and :mod:`.charts` (SVG line charts).
"""
