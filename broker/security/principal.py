"""Kafka principals (``User:alice``) and the mapping of a TLS certificate's distinguished name
to a principal (``ssl.principal.mapping.rules``, KIP-371).

Rules are Kafka's: a comma-separated list of ``RULE:pattern/replacement/[LU]`` and
``DEFAULT``, tried in order; the first whose pattern matches the whole DN gives the name
(``$1``-style group references in the replacement; ``/L`` lower-cases and ``/U`` upper-cases
the result); ``DEFAULT`` is the DN itself. A DN no rule matches is refused.

Concurrency: pure values and functions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ANONYMOUS = "User:ANONYMOUS"
USER_TYPE = "User"


def user(name: str) -> str:
    """The principal string of a user name."""
    return f"{USER_TYPE}:{name}"


def principal_name(principal: str) -> str:
    """``User:alice`` -> ``alice``."""
    return principal.split(":", 1)[1] if ":" in principal else principal


class PrincipalMappingError(ValueError):
    """``ssl.principal.mapping.rules`` that do not parse, or a DN no rule matches."""


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str
    case: str  # "", "L" or "U"

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        m = self.pattern.fullmatch(dn)
        if m is None:
            return None
        # Java's Matcher.replaceAll syntax: $1 group references
        out = re.sub(r"\$(\d+)", lambda g: m.group(int(g.group(1))) or "", self.replacement)
        if self.case == "L":
            out = out.lower()
        elif self.case == "U":
            out = out.upper()
        return out


_RULE = re.compile(r"\s*RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?)\s*(?:,|$)")
_DEFAULT = re.compile(r"\s*DEFAULT\s*(?:,|$)")


def parse_mapping_rules(text: str) -> tuple[_Rule, ...]:
    """Parse ``ssl.principal.mapping.rules`` (Kafka's syntax, see the module docstring)."""
    rules: list[_Rule] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _DEFAULT.match(text, pos)
        if m:
            rules.append(_Rule(None, "", ""))
            pos = m.end()
            continue
        m = _RULE.match(text, pos)
        if not m:
            raise PrincipalMappingError(
                f"Invalid value {text!r} for configuration ssl.principal.mapping.rules: "
                f"cannot parse the rule at {text[pos:]!r}"
            )
        try:
            pattern = re.compile(m.group(1).replace("\\/", "/"))
        except re.error as exc:
            raise PrincipalMappingError(
                f"Invalid pattern {m.group(1)!r} in ssl.principal.mapping.rules: {exc}"
            ) from exc
        rules.append(_Rule(pattern, m.group(2).replace("\\/", "/"), m.group(3)))
        pos = m.end()
    return tuple(rules) or (_Rule(None, "", ""),)


def map_distinguished_name(dn: str, rules: tuple[_Rule, ...]) -> str:
    """The principal of a certificate subject ``dn`` (RFC 2253 form) under ``rules``."""
    for rule in rules:
        name = rule.apply(dn)
        if name is not None:
            return user(name)
    raise PrincipalMappingError(f"no rule in ssl.principal.mapping.rules matches {dn!r}")


def subject_of(der_certificate: bytes) -> str:
    """The subject DN of a DER certificate as Java's ``X500Principal.getName()`` writes it
    (RFC 2253: most specific RDN first, ``CN=a,OU=b,O=c``)."""
    from cryptography import x509

    cert = x509.load_der_x509_certificate(der_certificate)
    return cert.subject.rfc4514_string()
