"""``broker/protocol/messages.py`` names, for each API, the union of the message classes of
exactly the versions the registry serves."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

import pytest

from broker.protocol import messages, registry

pytestmark = pytest.mark.unit


def _aliases() -> dict[str, Any]:
    source = Path(messages.__file__).read_text().replace("if TYPE_CHECKING:", "if True:")
    namespace: dict[str, Any] = {"__name__": "messages_under_test"}
    exec(compile(source, "messages.py", "exec"), namespace)
    return namespace


def test_every_alias_covers_exactly_the_served_versions() -> None:
    aliases = _aliases()
    for key, (name, low, high) in registry.SUPPORTED_APIS.items():
        for kind, lookup in (
            ("Request", registry.request_class),
            ("Response", registry.response_class),
        ):
            alias = aliases.get(f"{name}{kind}")
            assert alias is not None, f"messages.py has no {name}{kind}"
            members = set(typing.get_args(alias)) or {alias}
            expected = {lookup(key, v) for v in range(low, high + 1)}
            assert members == expected, f"{name}{kind}"
