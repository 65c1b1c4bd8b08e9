"""The one-line JAAS configuration Kafka takes in ``sasl.jaas.config``:
``<LoginModule class> <flag> key="value" key2=value2;``.

Used for a client's credentials (``username``/``password``, Spark's
``kafka.sasl.jaas.config``, a broker's inter-broker login) and for the PLAIN server's users
(``user_<name>="<password>"``, Kafka's ``PlainLoginModule`` convention).

Concurrency: pure functions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"

_HEAD = re.compile(r"\s*([\w.$]+)\s+(required|requisite|sufficient|optional)\b", re.IGNORECASE)
_OPTION = re.compile(r'\s*([\w.\-]+)\s*=\s*(?:"((?:\\.|[^"\\])*)"|([^\s;"]+))')


class JaasConfigError(ValueError):
    """A ``sasl.jaas.config`` value that does not parse; the message never holds it (it may
    hold a password)."""


@dataclass(frozen=True, slots=True)
class JaasConfig:
    module: str
    options: dict[str, str]

    @property
    def username(self) -> str | None:
        return self.options.get("username")

    @property
    def password(self) -> str | None:
        return self.options.get("password")

    def plain_users(self) -> dict[str, str]:
        """The ``user_<name>="<password>"`` entries (the PLAIN server's users)."""
        return {k[5:]: v for k, v in self.options.items() if k.startswith("user_")}


def parse_jaas(text: str, prop: str = "sasl.jaas.config") -> JaasConfig:
    m = _HEAD.match(text)
    if not m:
        raise JaasConfigError(
            f"Invalid value for configuration {prop}: expected "
            f"'<LoginModule> required key=\"value\" ...;'"
        )
    pos = m.end()
    options: dict[str, str] = {}
    while True:
        rest = text[pos:].strip()
        if rest in ("", ";"):
            break
        o = _OPTION.match(text, pos)
        if not o:
            raise JaasConfigError(
                f"Invalid value for configuration {prop}: cannot parse the login module "
                f"options after {m.group(1)}"
            )
        quoted = o.group(2)
        value = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else (o.group(3) or "")
        options[o.group(1)] = value
        pos = o.end()
    return JaasConfig(m.group(1), options)


def jaas_for(module: str, username: str, password: str) -> str:
    """The JAAS line of a login with ``username``/``password``."""

    def q(text: str) -> str:
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'

    return f"{module} required username={q(username)} password={q(password)};"
