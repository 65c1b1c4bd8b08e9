"""ApiVersions (key 18): the APIs and version ranges of the registry.

Millrace's own APIs (``registry.PRIVATE_APIS``) are listed only to a client whose
``client_software_name`` (v3+) starts with ``registry.MILLRACE_SOFTWARE_PREFIX``: Kafka's
clients and tools see exactly Kafka's APIs."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from broker.api.context import RequestContext
from broker.protocol import registry
from broker.protocol.api_keys import ApiKey
from broker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from broker.protocol import messages


def build_response(
    version: int, error: ErrorCode = ErrorCode.none, *, private: bool = False
) -> Any:
    """The response; ``private``: Millrace's own APIs listed too."""
    cls = registry.response_class(ApiKey.API_VERSIONS, version)
    api_cls = registry.nested(cls, "ApiVersion")
    keys = tuple(
        api_cls(api_key=key, min_version=lo, max_version=hi)
        for key, (_name, lo, hi) in sorted(registry.SUPPORTED_APIS.items())
        if private or key not in registry.PRIVATE_APIS
    )
    return registry.build(cls, error_code=error, api_keys=keys, throttle_time=datetime.timedelta(0))


async def handle(
    ctx: RequestContext, request: messages.ApiVersionsRequest
) -> messages.ApiVersionsResponse:
    software = str(getattr(request, "client_software_name", "") or "")
    return build_response(
        ctx.version, private=software.startswith(registry.MILLRACE_SOFTWARE_PREFIX)
    )
