"""The Starlette application: routes, security headers, GET/HEAD only, and error pages without tracebacks."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from urllib.parse import quote

import jinja2
from markupsafe import Markup, escape
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lenscope.errors import LenscopeError
from lenscope.store.values import Scalar
from lenscope.ui import crosscoder_page, downloads, features, pages, sweep_page
from lenscope.ui.figures import PngCache
from lenscope.ui.hosts import HostCheck
from lenscope.ui.nodes import Missing
from lenscope.ui.params import BadParameter
from lenscope.ui.readonly import ReadOnlyStore

log = logging.getLogger("lenscope.ui")

PAGE_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
               "form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
ARTIFACT_POLICY = "default-src 'none'; sandbox"  # downloads: nothing in them may run or load anything
STATIC = {"ui.js": "text/javascript; charset=utf-8", "theme.js": "text/javascript; charset=utf-8",
          "ui.css": "text/css; charset=utf-8", "icon.svg": "image/svg+xml",
          "graph.js": "text/javascript; charset=utf-8", "graph_prune.js": "text/javascript; charset=utf-8",
          "graph_draw.js": "text/javascript; charset=utf-8", "graph.css": "text/css; charset=utf-8"}


@dataclass
class UI:
    """What every handler needs: the readonly store, the templates and the figure cache."""

    store: ReadOnlyStore
    templates: jinja2.Environment
    pngs: PngCache

    def page(self, template: str, code: int = 200, **context) -> HTMLResponse:
        """An HTML page rendered from `template` (every value escaped by the template engine)."""
        html = self.templates.get_template(template).render(store=self.store.shown, **context)
        return HTMLResponse(html, status_code=code)


def templates() -> jinja2.Environment:
    """The page templates, autoescaping everything, with the UI's formatting filters."""
    env = jinja2.Environment(loader=jinja2.PackageLoader("lenscope.ui", "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(when=when, num=num, q=lambda text: quote(str(text), safe=""), size=size, breakable=breakable)
    return env


def breakable(text: str) -> Markup:
    """`text` escaped, with a line-break opportunity after each `/` (long metric names in narrow columns)."""
    return Markup(escape(str(text)).replace("/", Markup("/<wbr>")))


def when(timestamp: float | None) -> str:
    """A unix time as local `YYYY-MM-DD HH:MM:SS`."""
    return "-" if timestamp is None else datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M:%S")


def num(value: Scalar) -> str:
    """A stored value for a table cell: floats with 6 significant digits, None as `-`."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def size(count: int) -> str:
    """A byte count for people: 812 B, 14.9 KiB, 3.2 MiB."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{count} B"


def _static(request: Request) -> Response:
    name = request.path_params.get("name", "icon.svg")
    if name not in STATIC:
        raise Missing(f"no static file {name!r}")
    body = resources.files("lenscope.ui").joinpath("static", name).read_bytes()
    return Response(body, media_type=STATIC[name], headers={"Cache-Control": "no-cache"})


def _error_page(request: Request, status: int, message: str) -> HTMLResponse:
    ui: UI = request.app.state.ui
    titles = {400: "Bad request", 404: "Not found", 405: "Method not allowed", 421: "Unknown host"}
    response = ui.page("error.html", code=status, title=titles.get(status, "Error"), message=message)
    if status == 405:
        response.headers["Allow"] = "GET, HEAD"
    return response


def _http_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, HTTPException)
    message = "no such page" if error.status_code == 404 else error.detail
    return _error_page(request, error.status_code, message)


def _missing(request: Request, error: Exception) -> Response:
    return _error_page(request, 404, str(error))


def _bad_request(request: Request, error: Exception) -> Response:
    return _error_page(request, 400, str(error))


def _failure(request: Request, error: Exception) -> Response:
    """Any other error: a one-line page (the store's own message when it is a LenscopeError), logged in full."""
    log.error("error on %s %s", request.method, request.url.path, exc_info=error)
    message = str(error) if isinstance(error, LenscopeError) else f"internal error ({type(error).__name__})"
    return _error_page(request, 500, message)


class Guard:
    """ASGI middleware: a known Host, only GET and HEAD, no `..` path segment, security headers on every response."""

    def __init__(self, app: ASGIApp, hosts: HostCheck | None = None) -> None:
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if self.hosts is not None and not self.hosts.accepts(_header(scope, b"host")):
            scope = {**scope, "path": "/-/unknown-host", "method": "GET"}
        elif scope["method"] not in ("GET", "HEAD"):
            scope = {**scope, "path": "/-/method-not-allowed", "method": "GET"}
        elif b".." in scope.get("raw_path", path.encode()).split(b"/") or b"\\" in scope.get("raw_path", b""):
            scope = {**scope, "path": "/-/not-found"}
        download = path.startswith(("/artifact/", "/png/"))

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"content-security-policy"]
                headers += [(b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer"),
                            (b"x-frame-options", b"DENY"),
                            (b"content-security-policy", (ARTIFACT_POLICY if download else PAGE_POLICY).encode())]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def _refused(request: Request) -> Response:
    path = request.scope.get("root_path", "") + request.url.path
    if path == "/-/unknown-host":
        return _error_page(request, 421, "this server does not answer for that host name; start it with "
                                         "`lenscope ui --allow-host NAME` to reach it by that name")
    status = 405 if path == "/-/method-not-allowed" else 404
    return _error_page(request, status, "the UI is read-only: only GET and HEAD" if status == 405 else "no such page")


def create_app(store: ReadOnlyStore | str | os.PathLike | None = None, hosts: HostCheck | None = None) -> Starlette:
    """The UI's ASGI app over `store` (a ReadOnlyStore, or a folder/URL opened read-only; None: the default).

    With `hosts`, a request naming another Host is refused (421): what `lenscope ui` serves.
    """
    handle = store if isinstance(store, ReadOnlyStore) else ReadOnlyStore.open(store)
    routes = [
        Route("/", pages.runs),
        Route("/compare", pages.compare),
        Route("/run/{lineage}", pages.run),
        Route("/node/{address}", pages.node),
        Route("/view/{address}/{name:path}", pages.view),
        Route("/graph/{address}/{name:path}", pages.graph),
        Route("/sweeps", sweep_page.sweeps),
        Route("/sweep/{name:path}", sweep_page.sweep),
        Route("/features/{address}/{name}", features.features),
        Route("/feature/{address}/{name}/{latent}", features.feature),
        Route("/crosscoder/{address}/{name}", crosscoder_page.crosscoder),
        Route("/artifact/{address}/{name:path}", downloads.artifact),
        Route("/png/{address}/{name:path}", downloads.png),
        Route("/api/runs", downloads.api_runs),
        Route("/api/curves/{lineage}", downloads.api_curves),
        Route("/api/stamp", downloads.api_stamp),
        Route("/static/{name}", _static),
        Route("/favicon.ico", _static),
        Route("/-/method-not-allowed", _refused),
        Route("/-/not-found", _refused),
        Route("/-/unknown-host", _refused),
    ]
    handlers = {404: _http_error, 405: _http_error, BadParameter: _bad_request, Missing: _missing,
                Exception: _failure}
    app = Starlette(routes=routes, exception_handlers=handlers, middleware=[Middleware(Guard, hosts=hosts)])
    app.state.ui = UI(handle, templates(), PngCache())
    return app
