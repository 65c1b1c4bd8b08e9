"""Client quotas as in Kafka (ZooKeeper mode): ``producer_byte_rate``, ``consumer_byte_rate``
and ``request_percentage`` per user, client id and (user, client id), stored in
``/config/users`` and ``/config/clients`` and enforced with ``throttle_time_ms`` and channel
muting (KIP-13, KIP-55, KIP-124, KIP-219).

Modules: ``rate`` (Kafka's sampled ``Rate`` and the throttle-time formula), ``entities``
(quota entities, their znode paths, the quota config keys and values), ``manager`` (one
``ClientQuotaManager`` per quota type: precedence, sensors, throttling; ``ClientQuotas``
holding the three and what a request records), ``config_follower`` (loads the quota configs
from ZooKeeper and follows ``/config/changes``).
"""
