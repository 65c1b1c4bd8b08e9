"""The broker's own figures: the request path's counts (:mod:`broker.request_metrics`), its
lifecycle state, and its ZooKeeper session.

* ``kafka_server_kafkaserver_brokerstate`` (``kafka.server:type=KafkaServer,
  name=BrokerState``): Kafka's numbers, 1 starting, 2 recovering its logs, 3 running,
  6 pending controlled shutdown, 7 shutting down (:class:`broker.server.BrokerState`).
* ``kafka_server_sessionexpirelistener_sessionstate{state}`` (``kafka.server:
  type=SessionExpireListener,name=SessionState``, a string in JMX): 1 for the current state,
  0 for the others, among ZooKeeper's client state names as Kafka reports them: CONNECTED;
  CONNECTING (kazoo's SUSPENDED: the connection is lost, the session may live on); CLOSED
  (kazoo's LOST: the session expired, as ZooKeeper's Java client is then closed; or the
  session is not open).
* ``kafka_server_sessionexpirelistener_zookeeperexpires_total`` and
  ``..._zookeeperdisconnects_total`` (``ZooKeeperExpiresPerSec``,
  ``ZooKeeperDisconnectsPerSec``): counted by :class:`broker.zk.session.ZkSession`.

Concurrency: :func:`collect` runs on the event loop thread (the scrape's snapshot).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from broker.metrics.broker_view import BrokerView

__all__ = ["SESSION_STATES", "collect"]

SESSION_STATES = ("CONNECTED", "CONNECTING", "CLOSED")
"""The ``state`` label's values."""

# broker.zk.interface.ZkState's value -> ZooKeeper's state name
_SESSION_STATE_OF = {
    "CONNECTED": "CONNECTED",
    "SUSPENDED": "CONNECTING",
    "LOST": "CLOSED",
    "CLOSED": "CLOSED",
}


async def collect(broker: BrokerView) -> list[Metric]:
    out = list(broker.metrics.families())
    out.append(
        GaugeMetricFamily(
            "kafka_server_kafkaserver_brokerstate",
            "kafka.server:type=KafkaServer,name=BrokerState (3 running, 6 pending controlled "
            "shutdown, 7 shutting down)",
            value=int(broker.state),
        )
    )
    zk = broker.zk
    current = _SESSION_STATE_OF[zk.state.value] if zk is not None else "CLOSED"
    state = GaugeMetricFamily(
        "kafka_server_sessionexpirelistener_sessionstate",
        "kafka.server:type=SessionExpireListener,name=SessionState: 1 for the ZooKeeper "
        "client's current state",
        labels=["state"],
    )
    for name in SESSION_STATES:
        state.add_metric([name], 1 if name == current else 0)
    out.append(state)
    for name, jmx, value in (
        ("zookeeperexpires", "ZooKeeperExpiresPerSec", zk.expires if zk else 0),
        ("zookeeperdisconnects", "ZooKeeperDisconnectsPerSec", zk.disconnects if zk else 0),
    ):
        out.append(
            CounterMetricFamily(
                f"kafka_server_sessionexpirelistener_{name}",
                f"kafka.server:type=SessionExpireListener,name={jmx}",
                value=value,
            )
        )
    return out
