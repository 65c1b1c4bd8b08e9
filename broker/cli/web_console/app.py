"""The console's web app: Starlette routes rendering Jinja2 templates (``templates/``), plain
HTML forms, one stylesheet (``static/console.css``).

Pages (GET, read-only): ``/`` cluster, ``/topics``, ``/topics/{t}``, ``/messages``,
``/groups``, ``/groups/{g}``, ``/transactions``, ``/sinks``. Actions (POST, only with
``--allow-writes``, else 403 with a message; forms are not even shown): create, delete and
change the configs of a topic, reset a group's offsets, abort a transaction. Every action
goes through a confirmation page first (the form posts again with ``confirmed=1``; deleting a
topic also needs its name typed). A POST from another origin is refused (403), and a console
bound to a loopback address answers only requests naming a loopback host (DNS rebinding).

Errors: a :class:`ConsoleError` (bad input, a failed call) renders the page's error message
with status 400; any other exception the error page with its one-line text and status 500 -
never a traceback. GET routes are plain functions (Starlette runs them in its thread pool),
so the blocking Kafka calls, each with a time-out, never stall the event loop.

Concurrency: the app holds one :class:`ClusterSource` (thread-safe) and one
:class:`Sampler`; routes keep no state between requests.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from markupsafe import Markup
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Receive, Scope, Send

from broker.cli.web_console import group_source, prometheus, sinks, txn_source
from broker.cli.web_console.charts import line_chart
from broker.cli.web_console.cluster_source import (
    ClusterInfo,
    ClusterSource,
    ConsoleError,
    error_text,
)
from broker.cli.web_console.history import Sampler
from broker.cli.web_console.messages import (
    ISOLATIONS,
    RENDERINGS,
    browse,
    iso_ms,
    parse_integer,
    parse_query,
)
from broker.types import TopicPartition

HERE = Path(__file__).parent
MAX_INT32 = 2**31 - 1


class WritesDisabled(Exception):
    """A mutating action on a read-only console."""


@dataclass(frozen=True, slots=True)
class Settings:
    allow_writes: bool
    hanging_ms: int
    bootstrap: str
    bind_host: str = "127.0.0.1"


def loopback(host: str | None) -> bool:
    if host is None:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class LoopbackHostOnly:
    """ASGI middleware of a console bound to a loopback address: a request whose ``Host``
    names anything else (a DNS-rebound name pointing at 127.0.0.1, whose pages would then
    count as same-origin for the attacker's script) gets 403 and nothing else."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            host = Headers(scope=scope).get("host", "")
            if not loopback(urlsplit(f"//{host}").hostname):
                text = f"refused: Host {host!r} is not a loopback name (this console is local)"
                await PlainTextResponse(text, status_code=403)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def build_app(source: ClusterSource, sampler: Sampler, settings: Settings) -> Starlette:
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    templates.env.filters["iso"] = lambda ms: "-" if ms is None else iso_ms(int(ms))
    templates.env.filters["bytes"] = _bytes_text
    templates.env.filters["q"] = lambda s: quote(str(s), safe="")

    def page(request: Request, name: str, code: int = 200, **context: Any) -> Response:
        context.setdefault("notice", request.query_params.get("notice"))
        context["allow_writes"] = settings.allow_writes
        context["bootstrap"] = settings.bootstrap
        context["sampler_error"] = sampler.last_error
        return templates.TemplateResponse(request, name, context, status_code=code)

    def chart(series: Mapping[str, list[tuple[float, float]]], title: str, unit: str) -> Markup:
        return Markup(line_chart(series, title, unit))

    def sizes(info: ClusterInfo) -> dict[TopicPartition, int]:
        urls = source.metrics_urls()
        leaders = {
            TopicPartition(p.topic, p.partition): p.leader
            for t in info.topics
            for p in t.partitions
        }
        return prometheus.partition_sizes(urls, leaders) if urls else {}

    def writes(request: Request) -> None:
        if not settings.allow_writes:
            raise WritesDisabled
        refused = foreign_origin(request)
        if refused:
            raise HTTPException(403, f"refused: a form posted from another origin ({refused})")

    # --- pages -----------------------------------------------------------------------------

    def cluster_page(request: Request) -> Response:
        info = source.cluster()
        return page(
            request,
            "cluster.html",
            nav="cluster",
            info=info,
            rate_chart=chart(sampler.rates(), "Produce rate per topic", "records/s"),
            lag_chart=chart(sampler.lags(), "Consumer group lag", "records"),
            metrics=bool(source.metrics_urls()),
        )

    def topics_page(request: Request) -> Response:
        info = source.cluster()
        by_topic = prometheus.topic_sizes(sizes(info))
        return page(
            request,
            "topics.html",
            nav="topics",
            info=info,
            sizes=by_topic,
            metrics=bool(source.metrics_urls()),
        )

    def topic_page(request: Request) -> Response:
        name = request.path_params["name"]
        info = source.cluster()
        topic = info.topic(name)
        tps = [TopicPartition(name, p.partition) for p in topic.partitions]
        starts, errors = source.offsets(tps, "earliest")
        ends, end_errors = source.offsets(tps, "latest")
        errors.update(end_errors)
        return page(
            request,
            "topic.html",
            nav="topics",
            topic=topic,
            starts={tp.partition: v for tp, v in starts.items()},
            ends={tp.partition: v for tp, v in ends.items()},
            errors={str(tp): e for tp, e in errors.items()},
            sizes={tp.partition: v for tp, v in sizes(info).items() if tp.topic == name},
            metrics=bool(source.metrics_urls()),
            configs=source.topic_configs(name),
            rate_chart=chart(sampler.rates(name), f"Produce rate of {name}", "records/s"),
        )

    def messages_page(request: Request) -> Response:
        info = source.cluster()
        params = dict(request.query_params)
        topic = params.get("topic", "")
        context: dict[str, Any] = {
            "nav": "messages",
            "topics": [t.name for t in info.topics],
            "params": params,
            "isolations": ISOLATIONS,
            "renderings": RENDERINGS,
        }
        if topic:
            try:
                query = parse_query(topic, params)
                context["query"] = query
                context["result"] = browse(source, query)
            except ConsoleError as exc:
                context["error"] = str(exc)
                return page(request, "messages.html", 400, **context)
        return page(request, "messages.html", **context)

    def groups_page(request: Request) -> Response:
        groups = group_source.list_groups(source)
        lags = sampler.lags()
        latest = {g: int(pts[-1][1]) for g, pts in lags.items() if pts}
        return page(
            request,
            "groups.html",
            nav="groups",
            groups=groups,
            latest=latest,
            lag_chart=chart(lags, "Consumer group lag", "records"),
        )

    def group_page(request: Request) -> Response:
        group = request.path_params["group"]
        detail = group_source.describe_group(source, group)
        return page(
            request,
            "group.html",
            nav="groups",
            detail=detail,
            kinds=group_source.RESET_KINDS,
            lag_chart=chart(sampler.lags(group), f"Lag of {group}", "records"),
            topics=sorted({r.tp.topic for r in detail.rows}),
        )

    def transactions_page(request: Request) -> Response:
        listed = txn_source.list_transactions(source)
        scan = request.query_params.get("scan") == "1"
        hanging, scan_errors = (
            txn_source.find_hanging(source, settings.hanging_ms) if scan else ([], [])
        )
        return page(
            request,
            "transactions.html",
            nav="transactions",
            listed=listed,
            open=[t for t in listed.transactions if t.open],
            closed=[t for t in listed.transactions if not t.open],
            hanging_ms=settings.hanging_ms,
            scan=scan,
            hanging=hanging,
            scan_errors=scan_errors,
        )

    def sinks_page(request: Request) -> Response:
        return page(request, "sinks.html", nav="sinks", sinks=sinks.find_sinks(source))

    # --- actions (POST) ----------------------------------------------------------------------

    async def form_of(request: Request) -> dict[str, str]:
        form = await request.form()
        return {k: v for k, v in form.multi_items() if isinstance(v, str)}

    def confirm(
        request: Request,
        title: str,
        lines: list[str],
        fields: Mapping[str, str],
        *,
        type_name: str | None = None,
        back: str = "/",
    ) -> Response:
        return page(
            request,
            "confirm.html",
            nav="",
            title=title,
            lines=lines,
            fields=fields,
            type_name=type_name,
            action=request.url.path,
            back=back,
        )

    def done(url: str, notice: str) -> Response:
        sep = "&" if "?" in url else "?"
        return RedirectResponse(f"{url}{sep}{urlencode({'notice': notice})}", status_code=303)

    async def create_topic(request: Request) -> Response:
        writes(request)
        form = await form_of(request)
        name = form.get("name", "").strip()
        if not name:
            raise ConsoleError("topic name: must not be empty")
        partitions = _positive(form.get("partitions", "1"), "partitions")
        replication = _positive(form.get("replication", "1"), "replication factor")
        configs = _key_values(form.get("configs", ""))
        if form.get("confirmed") != "1":
            lines = [
                f"create topic {name}",
                f"partitions: {partitions}",
                f"replication factor: {replication}",
                *(f"config {k} = {v}" for k, v in sorted(configs.items())),
            ]
            return confirm(request, f"Create topic {name}?", lines, form, back="/topics")
        await run_in_threadpool(source.create_topic, name, partitions, replication, configs)
        return done(f"/topics/{quote(name, safe='')}", f"topic {name} created")

    async def delete_topic(request: Request) -> Response:
        writes(request)
        name = request.path_params["name"]
        form = await form_of(request)
        if form.get("confirmed") != "1" or form.get("typed", "") != name:
            lines = [f"delete topic {name} and all its data"]
            if form.get("confirmed") == "1":
                lines.append("the name typed does not match: nothing deleted")
            return confirm(
                request,
                f"Delete topic {name}?",
                lines,
                {},
                type_name=name,
                back=f"/topics/{quote(name, safe='')}",
            )
        await run_in_threadpool(source.delete_topic, name)
        return done("/topics", f"topic {name} deleted")

    async def alter_configs(request: Request) -> Response:
        writes(request)
        name = request.path_params["name"]
        form = await form_of(request)
        key = form.get("config", "").strip()
        if not key:
            raise ConsoleError("config name: must not be empty")
        delete = form.get("operation") == "delete"
        value = None if delete else form.get("value", "")
        if form.get("confirmed") != "1":
            current = {c.name: c for c in await run_in_threadpool(source.topic_configs, name)}
            was = current[key].value if key in current else "(not set)"
            change = "back to its default" if delete else f"to {value}"
            lines = [f"topic {name}: set {key} {change}", f"current value: {was}"]
            return confirm(
                request,
                f"Change a config of {name}?",
                lines,
                form,
                back=f"/topics/{quote(name, safe='')}",
            )
        await run_in_threadpool(source.alter_configs, name, {key: value})
        return done(f"/topics/{quote(name, safe='')}", f"config {key} of {name} changed")

    async def reset_offsets(request: Request) -> Response:
        writes(request)
        group = request.path_params["group"]
        form = await form_of(request)
        spec = group_source.reset_spec(form.get("to", ""), form.get("value", ""))
        topic = form.get("topic") or None
        detail, plan = await run_in_threadpool(
            group_source.plan_group_reset, source, group, spec, topic
        )
        back = f"/groups/{quote(group, safe='')}"
        if form.get("confirmed") != "1":
            current = {r.tp: r.committed for r in detail.rows}
            lines = [
                f"{tp}: {'-' if current.get(tp) is None else current[tp]} -> {off}"
                for tp, off in sorted(plan.offsets.items())
            ]
            fields = dict(form)
            fields["plan"] = ",".join(
                f"{tp.topic}|{tp.partition}|{o}" for tp, o in plan.offsets.items()
            )
            return confirm(
                request,
                f"Reset the offsets of group {group}?",
                [*lines, *plan.warnings],
                fields,
                back=back,
            )
        offsets = _plan_of(form.get("plan", "")) or plan.offsets
        await run_in_threadpool(group_source.execute_reset, source, group, offsets)
        return done(back, f"offsets of group {group} reset ({len(offsets)} partitions)")

    async def abort_transaction(request: Request) -> Response:
        writes(request)
        form = await form_of(request)
        tid = form.get("transactional_id", "")
        if form.get("confirmed") != "1":
            lines = [
                f"abort the open transaction of {tid}: its coordinator aborts it and its "
                "producer is fenced (InitProducerId)"
            ]
            return confirm(request, f"Abort {tid}?", lines, form, back="/transactions")
        await run_in_threadpool(txn_source.fence, source, tid)
        return done("/transactions", f"transaction of {tid} aborted")

    async def abort_hanging(request: Request) -> Response:
        writes(request)
        form = await form_of(request)
        topic = form.get("topic", "")
        partition = _positive(form.get("partition", "0"), "partition", 0)
        start = parse_integer(form.get("start_offset", "0"), "start offset")
        if form.get("confirmed") != "1":
            lines = [f"write an abort marker for the transaction at {topic}-{partition}:{start}"]
            return confirm(
                request, "Abort a hanging transaction?", lines, form, back="/transactions"
            )
        await run_in_threadpool(txn_source.abort_hanging, source, topic, partition, start)
        return done("/transactions?scan=1", f"hanging transaction at {topic}-{partition} aborted")

    # --- errors ------------------------------------------------------------------------------

    async def console_error(request: Request, exc: Exception) -> Response:
        return page(request, "error.html", 400, nav="", message=error_text(exc), status=400)

    async def writes_disabled(request: Request, exc: Exception) -> Response:
        message = "this console is read-only: start it with --allow-writes to change the cluster"
        return page(request, "error.html", 403, nav="", message=message, status=403)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return page(
            request,
            "error.html",
            exc.status_code,
            nav="",
            message=exc.detail,
            status=exc.status_code,
        )

    async def any_error(request: Request, exc: Exception) -> Response:
        message = f"{type(exc).__name__}: {error_text(exc)}"
        return page(request, "error.html", 500, nav="", message=message, status=500)

    handlers: dict[Any, Callable[[Request, Exception], Any]] = {
        ConsoleError: console_error,
        WritesDisabled: writes_disabled,
        HTTPException: http_error,
        Exception: any_error,
    }
    routes = [
        Route("/", cluster_page),
        Route("/topics", topics_page),
        Route("/topics", create_topic, methods=["POST"]),
        Route("/topics/{name}", topic_page),
        Route("/topics/{name}/delete", delete_topic, methods=["POST"]),
        Route("/topics/{name}/configs", alter_configs, methods=["POST"]),
        Route("/messages", messages_page),
        Route("/groups", groups_page),
        Route("/groups/{group}", group_page),
        Route("/groups/{group}/reset", reset_offsets, methods=["POST"]),
        Route("/transactions", transactions_page),
        Route("/transactions/abort", abort_transaction, methods=["POST"]),
        Route("/transactions/abort-hanging", abort_hanging, methods=["POST"]),
        Route("/sinks", sinks_page),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    middleware = [Middleware(LoopbackHostOnly)] if loopback(settings.bind_host) else []
    return Starlette(routes=routes, exception_handlers=handlers, middleware=middleware)


def foreign_origin(request: Request) -> str | None:
    """What makes a POST cross-origin (CSRF), or None: an ``Origin`` other than this
    console's own (``null`` included: sandboxed frames, data: URLs), or a browser's
    ``Sec-Fetch-Site: cross-site``."""
    origin = request.headers.get("origin")
    if origin is not None and origin != f"{request.url.scheme}://{request.url.netloc}":
        return origin
    if request.headers.get("sec-fetch-site") == "cross-site":
        return "Sec-Fetch-Site: cross-site"
    return None


def _positive(text: str, field: str, minimum: int = 1) -> int:
    return parse_integer(text, field, minimum, MAX_INT32)


def _key_values(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise ConsoleError(f"config {line!r}: expected NAME=VALUE, one per line")
        out[key.strip()] = value.strip()
    return out


def _plan_of(text: str) -> dict[TopicPartition, int]:
    out: dict[TopicPartition, int] = {}
    for item in text.split(","):
        if not item:
            continue
        try:
            topic, partition, offset = item.rsplit("|", 2)
            out[TopicPartition(topic, int(partition))] = int(offset)
        except ValueError:
            raise ConsoleError(f"reset plan {item!r}: malformed") from None
    return out


def _bytes_text(n: int | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def now_ms() -> int:
    return int(time.time() * 1000)
