"""``broker/protocol/messages.py`` names, for each API, the union of the message classes of
exactly the versions the registry serves."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

import pytest

from broker.protocol import interbroker, messages, registry

pytestmark = pytest.mark.unit


def _aliases() -> dict[str, Any]:
    source = Path(messages.__file__).read_text().replace("if TYPE_CHECKING:", "if True:")
    namespace: dict[str, Any] = {"__name__": "messages_under_test"}
    exec(compile(source, "messages.py", "exec"), namespace)
    return namespace


def test_every_alias_covers_exactly_the_served_versions() -> None:
    aliases = _aliases()
    for key, (name, low, advertised) in registry.SUPPORTED_APIS.items():
        high = max(advertised, registry.SERVED_BEYOND_ADVERTISED.get(key, advertised))
        for kind, lookup in (
            ("Request", registry.request_class),
            ("Response", registry.response_class),
        ):
            alias = aliases.get(f"{name}{kind}")
            assert alias is not None, f"messages.py has no {name}{kind}"
            expected = {lookup(key, v) for v in range(low, high + 1)}
            if key in interbroker.VERSIONS:  # generated classes: named Any in messages.py
                assert alias is Any, f"{name}{kind}"
                table = interbroker.REQUESTS if kind == "Request" else interbroker.RESPONSES
                assert expected == {table[(key, v)] for v in range(low, high + 1)}
                continue
            members = set(typing.get_args(alias)) or {alias}
            assert members == expected, f"{name}{kind}"
