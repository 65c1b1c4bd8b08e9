"""Conflicting listener settings (``broker/config.py``, :func:`~broker.config.check_listeners`):
each fails ``BrokerConfig`` with one line naming the setting, and ``millrace broker start``
prints that line and exits 2 before it binds a port or reaches ZooKeeper."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from broker.cli.main import main
from broker.config import BrokerConfig
from broker.config_def import ConfigError

pytestmark = pytest.mark.unit

# (properties, the setting the message must name, a phrase of the message)
CONFLICTS = {
    "two listeners on one port": (
        {"listeners": "PLAINTEXT://10.0.0.11:9092,SSL://10.0.0.11:9092"},
        "configuration listeners",
        "use the same port 9092",
    ),
    "two listeners on one port, different addresses": (
        {
            "listeners": "INTERNAL://10.0.0.11:9092,EXTERNAL://192.0.2.11:9092",
            "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
        },
        "configuration listeners",
        "use the same port 9092",
    ),
    "advertised listener not in listeners": (
        {
            "listeners": "PLAINTEXT://10.0.0.11:9092",
            "advertised.listeners": "EXTERNAL://broker1.example.com:9092",
        },
        "configuration advertised.listeners",
        "listener EXTERNAL (EXTERNAL://broker1.example.com:9092) is not in listeners",
    ),
    "listener without a security protocol": (
        {"listeners": "INTERNAL://10.0.0.11:9092"},
        "configuration listener.security.protocol.map",
        "listener INTERNAL of listeners has no security protocol",
    ),
    "same listener name twice": (
        {"listeners": "PLAINTEXT://10.0.0.11:9092,PLAINTEXT://10.0.0.11:9093"},
        "configuration listeners",
        "listener name PLAINTEXT is used twice",
    ),
    "same listener name twice in advertised.listeners": (
        {
            "listeners": "PLAINTEXT://0.0.0.0:9092",
            "advertised.listeners": "PLAINTEXT://10.0.0.11:9092,plaintext://10.0.0.11:9093",
        },
        "configuration advertised.listeners",
        "listener name PLAINTEXT is used twice",
    ),
    "wildcard address advertised": (
        {"listeners": "PLAINTEXT://0.0.0.0:9092"},
        "configuration listeners",
        "cannot connect to the wildcard address 0.0.0.0",
    ),
    "wildcard address in advertised.listeners": (
        {
            "listeners": "PLAINTEXT://10.0.0.11:9092",
            "advertised.listeners": "PLAINTEXT://[::]:9092",
        },
        "configuration advertised.listeners",
        "cannot connect to the wildcard address ::",
    ),
    "port out of range": (
        {"listeners": "PLAINTEXT://10.0.0.11:90920"},
        "configuration listeners",
        "a port from 0 to 65535",
    ),
}


@pytest.mark.parametrize("case", sorted(CONFLICTS))
def test_conflicting_listener_settings_fail_naming_the_setting(case: str) -> None:
    props, setting, phrase = CONFLICTS[case]
    with pytest.raises(ConfigError) as info:
        BrokerConfig(props)
    message = str(info.value)
    assert setting in message
    assert phrase in message
    assert "\n" not in message


@pytest.mark.parametrize("case", sorted(CONFLICTS))
def test_broker_start_prints_one_line_and_exits_2(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    props, setting, phrase = CONFLICTS[case]
    config = tmp_path / "server.properties"
    lines = {
        "broker.id": "1",
        "log.dirs": str(tmp_path / "data"),
        # nothing listens on port 1: the check must come before any connection
        "zookeeper.connect": "127.0.0.1:1/millrace",
        **props,
    }
    config.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
    assert main(["broker", "start", "--config", str(config)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("millrace broker: ")
    assert setting in err[0] and phrase in err[0]
    assert not (tmp_path / "data").exists()


def test_valid_several_hosts_listeners_pass() -> None:
    """The shapes docs/operations.md ("Several hosts") shows: bind every interface and
    advertise the host's address; one listener per network with a protocol map; an IPv4 and
    an IPv6 address sharing a port; port 0 twice."""
    cfg = BrokerConfig(
        {
            "listeners": "PLAINTEXT://0.0.0.0:9092",
            "advertised.listeners": "PLAINTEXT://10.0.0.11:9092",
        }
    )
    assert [str(x) for x in cfg.advertised_listeners] == ["PLAINTEXT://10.0.0.11:9092"]
    cfg = BrokerConfig(
        {
            "listeners": "INTERNAL://10.0.0.11:9092,EXTERNAL://0.0.0.0:9093",
            "advertised.listeners": "INTERNAL://10.0.0.11:9092,EXTERNAL://broker1.example.com:9093",
            "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:SASL_SSL",
            "inter.broker.listener.name": "INTERNAL",
        }
    )
    assert [x.name for x in cfg.listeners] == ["INTERNAL", "EXTERNAL"]
    BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:9092,SSL://[::1]:9092"})
    BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0"})
    # an advertised listener may share a port with another (a proxy or NAT in front)
    BrokerConfig(
        {
            "listeners": "A://10.0.0.11:9092,B://10.0.0.11:9093",
            "advertised.listeners": "A://lb.example.com:9092,B://lb2.example.com:9092",
            "listener.security.protocol.map": "A:PLAINTEXT,B:PLAINTEXT",
        }
    )


def test_listener_without_host_is_advertised_with_the_fqdn() -> None:
    """``PLAINTEXT://:9092`` binds every interface and advertises this machine's fully
    qualified name (Kafka advertises its canonical host name)."""
    cfg = BrokerConfig({"listeners": "PLAINTEXT://:9092"})
    assert cfg.listeners[0].host == "0.0.0.0"
    assert cfg.advertised_listeners[0].host == socket.getfqdn()
