"""ApiVersions (key 18): the APIs and version ranges of the registry."""

from __future__ import annotations

import datetime
from typing import Any

from broker.api.context import RequestContext
from broker.protocol import registry
from broker.protocol.errors import ErrorCode


def build_response(version: int, error: ErrorCode = ErrorCode.none) -> Any:
    cls = registry.response_class(18, version)
    api_cls = registry.nested(cls, "ApiVersion")
    keys = tuple(
        api_cls(api_key=key, min_version=lo, max_version=hi)
        for key, (_name, lo, hi) in sorted(registry.SUPPORTED_APIS.items())
    )
    return registry.build(cls, error_code=error, api_keys=keys, throttle_time=datetime.timedelta(0))


async def handle(ctx: RequestContext, request: Any) -> Any:
    return build_response(ctx.version)
