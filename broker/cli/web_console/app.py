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
TOPIC_WAIT_S = 5.0
"""A topic's page asks again for this long while the broker answering does not know the
topic yet (a topic just created reaches each broker's metadata a moment after the
controller's, as in Kafka)."""


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
    console = _Console(source, sampler, settings)

    handlers: dict[Any, Callable[[Request, Exception], Any]] = {
        ConsoleError: console.console_error,
        WritesDisabled: console.writes_disabled,
        HTTPException: console.http_error,
        Exception: console.any_error,
    }
    routes = [
        Route("/", console.cluster_page),
        Route("/topics", console.topics_page),
        Route("/topics", console.create_topic, methods=["POST"]),
        Route("/topics/{name}", console.topic_page),
        Route("/topics/{name}/delete", console.delete_topic, methods=["POST"]),
        Route("/topics/{name}/configs", console.alter_configs, methods=["POST"]),
        Route("/messages", console.messages_page),
        Route("/groups", console.groups_page),
        Route("/groups/{group}", console.group_page),
        Route("/groups/{group}/reset", console.reset_offsets, methods=["POST"]),
        Route("/transactions", console.transactions_page),
        Route("/transactions/abort", console.abort_transaction, methods=["POST"]),
        Route("/transactions/abort-hanging", console.abort_hanging, methods=["POST"]),
        Route("/sinks", console.sinks_page),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    middleware = [Middleware(LoopbackHostOnly)] if loopback(settings.bind_host) else []
    return Starlette(routes=routes, exception_handlers=handlers, middleware=middleware)


class _Console:
    """The console's pages, actions and error pages (the routes of :func:`build_app`)."""

    def __init__(self, source: ClusterSource, sampler: Sampler, settings: Settings) -> None:
        self.source = source
        self.sampler = sampler
        self.settings = settings
        self.templates = Jinja2Templates(directory=str(HERE / "templates"))
        self.templates.env.filters["iso"] = lambda ms: "-" if ms is None else iso_ms(int(ms))
        self.templates.env.filters["bytes"] = _bytes_text
        self.templates.env.filters["q"] = lambda s: quote(str(s), safe="")

    def page(self, request: Request, name: str, code: int = 200, **context: Any) -> Response:
        context.setdefault("notice", request.query_params.get("notice"))
        context["allow_writes"] = self.settings.allow_writes
        context["bootstrap"] = self.settings.bootstrap
        context["sampler_error"] = self.sampler.last_error
        return self.templates.TemplateResponse(request, name, context, status_code=code)

    def chart(
        self, series: Mapping[str, list[tuple[float, float]]], title: str, unit: str
    ) -> Markup:
        return Markup(line_chart(series, title, unit))

    def sizes(self, info: ClusterInfo) -> dict[TopicPartition, int]:
        urls = self.source.metrics_urls()
        leaders = {
            TopicPartition(p.topic, p.partition): p.leader
            for t in info.topics
            for p in t.partitions
        }
        return prometheus.partition_sizes(urls, leaders) if urls else {}

    def writes(self, request: Request) -> None:
        if not self.settings.allow_writes:
            raise WritesDisabled
        refused = foreign_origin(request)
        if refused:
            raise HTTPException(403, f"refused: a form posted from another origin ({refused})")

    # --- pages -----------------------------------------------------------------------------

    def cluster_page(self, request: Request) -> Response:
        info = self.source.cluster()
        return self.page(
            request,
            "cluster.html",
            nav="cluster",
            info=info,
            rate_chart=self.chart(self.sampler.rates(), "Produce rate per topic", "records/s"),
            lag_chart=self.chart(self.sampler.lags(), "Consumer group lag", "records"),
            metrics=bool(self.source.metrics_urls()),
        )

    def topics_page(self, request: Request) -> Response:
        info = self.source.cluster()
        by_topic = prometheus.topic_sizes(self.sizes(info))
        return self.page(
            request,
            "topics.html",
            nav="topics",
            info=info,
            sizes=by_topic,
            metrics=bool(self.source.metrics_urls()),
        )

    def _cluster_knowing(self, name: str) -> ClusterInfo:
        """The cluster, asked again for up to :data:`TOPIC_WAIT_S` while it shows no topic
        ``name`` (then the page says the topic does not exist)."""
        deadline = time.monotonic() + TOPIC_WAIT_S
        while True:
            info = self.source.cluster()
            if any(t.name == name for t in info.topics) or time.monotonic() >= deadline:
                return info
            time.sleep(0.2)

    def topic_page(self, request: Request) -> Response:
        name = request.path_params["name"]
        info = self._cluster_knowing(name)
        topic = info.topic(name)
        tps = [TopicPartition(name, p.partition) for p in topic.partitions]
        starts, errors = self.source.offsets(tps, "earliest")
        ends, end_errors = self.source.offsets(tps, "latest")
        errors.update(end_errors)
        return self.page(
            request,
            "topic.html",
            nav="topics",
            topic=topic,
            starts={tp.partition: v for tp, v in starts.items()},
            ends={tp.partition: v for tp, v in ends.items()},
            errors={str(tp): e for tp, e in errors.items()},
            sizes={tp.partition: v for tp, v in self.sizes(info).items() if tp.topic == name},
            metrics=bool(self.source.metrics_urls()),
            configs=self.source.topic_configs(name),
            rate_chart=self.chart(self.sampler.rates(name), f"Produce rate of {name}", "records/s"),
        )

    def messages_page(self, request: Request) -> Response:
        info = self.source.cluster()
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
                context["result"] = browse(self.source, query)
            except ConsoleError as exc:
                context["error"] = str(exc)
                return self.page(request, "messages.html", 400, **context)
        return self.page(request, "messages.html", **context)

    def groups_page(self, request: Request) -> Response:
        groups = group_source.list_groups(self.source)
        lags = self.sampler.lags()
        latest = {g: int(pts[-1][1]) for g, pts in lags.items() if pts}
        return self.page(
            request,
            "groups.html",
            nav="groups",
            groups=groups,
            latest=latest,
            lag_chart=self.chart(lags, "Consumer group lag", "records"),
        )

    def group_page(self, request: Request) -> Response:
        group = request.path_params["group"]
        detail = group_source.describe_group(self.source, group)
        return self.page(
            request,
            "group.html",
            nav="groups",
            detail=detail,
            kinds=group_source.RESET_KINDS,
            lag_chart=self.chart(self.sampler.lags(group), f"Lag of {group}", "records"),
            topics=sorted({r.tp.topic for r in detail.rows}),
        )

    def transactions_page(self, request: Request) -> Response:
        listed = txn_source.list_transactions(self.source)
        scan = request.query_params.get("scan") == "1"
        hanging, scan_errors = (
            txn_source.find_hanging(self.source, self.settings.hanging_ms) if scan else ([], [])
        )
        return self.page(
            request,
            "transactions.html",
            nav="transactions",
            listed=listed,
            open=[t for t in listed.transactions if t.open],
            closed=[t for t in listed.transactions if not t.open],
            hanging_ms=self.settings.hanging_ms,
            scan=scan,
            hanging=hanging,
            scan_errors=scan_errors,
        )

    def sinks_page(self, request: Request) -> Response:
        return self.page(request, "sinks.html", nav="sinks", sinks=sinks.find_sinks(self.source))

    # --- actions (POST) ----------------------------------------------------------------------

    async def form_of(self, request: Request) -> dict[str, str]:
        form = await request.form()
        return {k: v for k, v in form.multi_items() if isinstance(v, str)}

    def confirm(
        self,
        request: Request,
        title: str,
        lines: list[str],
        fields: Mapping[str, str],
        *,
        type_name: str | None = None,
        back: str = "/",
    ) -> Response:
        return self.page(
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

    def done(self, url: str, notice: str) -> Response:
        sep = "&" if "?" in url else "?"
        return RedirectResponse(f"{url}{sep}{urlencode({'notice': notice})}", status_code=303)

    async def create_topic(self, request: Request) -> Response:
        self.writes(request)
        form = await self.form_of(request)
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
            return self.confirm(request, f"Create topic {name}?", lines, form, back="/topics")
        await run_in_threadpool(self.source.create_topic, name, partitions, replication, configs)
        return self.done(f"/topics/{quote(name, safe='')}", f"topic {name} created")

    async def delete_topic(self, request: Request) -> Response:
        self.writes(request)
        name = request.path_params["name"]
        form = await self.form_of(request)
        if form.get("confirmed") != "1" or form.get("typed", "") != name:
            lines = [f"delete topic {name} and all its data"]
            if form.get("confirmed") == "1":
                lines.append("the name typed does not match: nothing deleted")
            return self.confirm(
                request,
                f"Delete topic {name}?",
                lines,
                {},
                type_name=name,
                back=f"/topics/{quote(name, safe='')}",
            )
        await run_in_threadpool(self.source.delete_topic, name)
        return self.done("/topics", f"topic {name} deleted")

    async def alter_configs(self, request: Request) -> Response:
        self.writes(request)
        name = request.path_params["name"]
        form = await self.form_of(request)
        key = form.get("config", "").strip()
        if not key:
            raise ConsoleError("config name: must not be empty")
        delete = form.get("operation") == "delete"
        value = None if delete else form.get("value", "")
        if form.get("confirmed") != "1":
            current = {c.name: c for c in await run_in_threadpool(self.source.topic_configs, name)}
            was = current[key].value if key in current else "(not set)"
            change = "back to its default" if delete else f"to {value}"
            lines = [f"topic {name}: set {key} {change}", f"current value: {was}"]
            return self.confirm(
                request,
                f"Change a config of {name}?",
                lines,
                form,
                back=f"/topics/{quote(name, safe='')}",
            )
        await run_in_threadpool(self.source.alter_configs, name, {key: value})
        return self.done(f"/topics/{quote(name, safe='')}", f"config {key} of {name} changed")

    async def reset_offsets(self, request: Request) -> Response:
        self.writes(request)
        group = request.path_params["group"]
        form = await self.form_of(request)
        spec = group_source.reset_spec(form.get("to", ""), form.get("value", ""))
        topic = form.get("topic") or None
        detail, plan = await run_in_threadpool(
            group_source.plan_group_reset, self.source, group, spec, topic
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
            return self.confirm(
                request,
                f"Reset the offsets of group {group}?",
                [*lines, *plan.warnings],
                fields,
                back=back,
            )
        offsets = _plan_of(form.get("plan", "")) or plan.offsets
        await run_in_threadpool(group_source.execute_reset, self.source, group, offsets)
        return self.done(back, f"offsets of group {group} reset ({len(offsets)} partitions)")

    async def abort_transaction(self, request: Request) -> Response:
        self.writes(request)
        form = await self.form_of(request)
        tid = form.get("transactional_id", "")
        if form.get("confirmed") != "1":
            lines = [
                f"abort the open transaction of {tid}: its coordinator aborts it and its "
                "producer is fenced (InitProducerId)"
            ]
            return self.confirm(request, f"Abort {tid}?", lines, form, back="/transactions")
        await run_in_threadpool(txn_source.fence, self.source, tid)
        return self.done("/transactions", f"transaction of {tid} aborted")

    async def abort_hanging(self, request: Request) -> Response:
        self.writes(request)
        form = await self.form_of(request)
        topic = form.get("topic", "")
        partition = _positive(form.get("partition", "0"), "partition", 0)
        start = parse_integer(form.get("start_offset", "0"), "start offset")
        if form.get("confirmed") != "1":
            lines = [f"write an abort marker for the transaction at {topic}-{partition}:{start}"]
            return self.confirm(
                request, "Abort a hanging transaction?", lines, form, back="/transactions"
            )
        await run_in_threadpool(txn_source.abort_hanging, self.source, topic, partition, start)
        return self.done(
            "/transactions?scan=1", f"hanging transaction at {topic}-{partition} aborted"
        )

    # --- errors ------------------------------------------------------------------------------

    async def console_error(self, request: Request, exc: Exception) -> Response:
        return self.page(request, "error.html", 400, nav="", message=error_text(exc), status=400)

    async def writes_disabled(self, request: Request, exc: Exception) -> Response:
        message = "this console is read-only: start it with --allow-writes to change the cluster"
        return self.page(request, "error.html", 403, nav="", message=message, status=403)

    async def http_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return self.page(
            request,
            "error.html",
            exc.status_code,
            nav="",
            message=exc.detail,
            status=exc.status_code,
        )

    async def any_error(self, request: Request, exc: Exception) -> Response:
        message = f"{type(exc).__name__}: {error_text(exc)}"
        return self.page(request, "error.html", 500, nav="", message=message, status=500)


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
