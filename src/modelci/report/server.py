"""`modelci serve`: the dashboard over HTTP (stdlib ThreadingHTTPServer), rebuilt when the history changes.

Every request for a page first compares the history's signature (Store.signature: the newest ids of the tables)
with the one the site was built from, and rebuilds under a lock when it moved; other requests wait for that
build rather than start their own. Assets are never rebuilt, so they are served without the check.
"""

from __future__ import annotations

import ipaddress
import shutil
import socket
import sys
import tempfile
import threading
import time
import urllib.parse
from functools import partial
from http import HTTPStatus
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable

from modelci.errors import UserError
from modelci.report import queries
from modelci.report.site import SiteReport, generate_site, plotly_js

__all__ = ["LiveSite", "DashboardServer", "make_server", "is_loopback"]


class LiveSite:
    """A generated site that knows which history it was built from and rebuilds itself when that changes."""

    def __init__(self, store: Any, out: Path, log: Callable[[str], object] = print, **options: Any):
        self.store, self.out, self.log, self.options = store, out, log, options
        self.built_from: tuple | None = None
        self.last: SiteReport | None = None
        self._lock = threading.Lock()

    def refresh(self) -> bool:
        """Rebuild when the history changed since the last build; returns whether it rebuilt."""
        with self._lock:
            current = queries.signature(self.store)
            if current == self.built_from:
                return False
            self.last = generate_site(self.store, self.out, **self.options)
            self.built_from = current
            self.log(f"built the site: {self.last.pages} pages in {self.last.seconds:.1f} s")
            return True


class _Handler(SimpleHTTPRequestHandler):
    """Serves the site's files; a page request refreshes the site first."""

    server: DashboardServer

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        """Refresh before a page (not an asset), then serve the file."""
        path = self.path.split("?", 1)[0]
        if path.endswith((".html", "/")):
            try:
                self.server.site.refresh()
            except Exception as exc:  # a broken rebuild must not take the server down; the old pages stay
                self.server.site.log(f"could not rebuild the site: {exc}")
        super().do_GET()

    def send_head(self):  # noqa: ANN201 (http.server's: a file object or None)
        """A path no file can have (a NUL byte, `%00`) is a 400: the os calls behind the base class raise on it,
        which printed a traceback to the server's log and left the client without an answer. The site's own
        bookkeeping (`.modelci-site.json`, any name beginning with a dot) is not served."""
        parts = urllib.parse.unquote(self.path.split("?", 1)[0].split("#", 1)[0]).split("/")
        if any(part.startswith(".") and part not in (".", "..") for part in parts):
            self.send_error(HTTPStatus.NOT_FOUND, "not part of the dashboard")
            return None
        try:
            return super().send_head()
        except ValueError:
            self.send_error(HTTPStatus.BAD_REQUEST, "the path holds a character no file name can")
            return None

    def list_directory(self, path: Any) -> None:  # noqa: ANN401 (http.server's signature)
        """A folder without an index page is no page of the dashboard: no listing of its files."""
        self.send_error(HTTPStatus.NOT_FOUND, "not part of the dashboard")
        return None

    def end_headers(self) -> None:
        """Pages change after each run, so browsers must ask again rather than cache them."""
        self.send_header("Cache-Control", "no-cache")
        super().end_headers()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (signature of the base class)
        """Quiet unless verbose: CI logs need not list every asset."""
        if self.server.verbose:
            sys.stderr.write("%s - %s\n" % (self.address_string(), format % args))


class DashboardServer(ThreadingHTTPServer):
    """A threading HTTP server over a LiveSite's folder."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], site: LiveSite, verbose: bool = False):
        self.site, self.verbose = site, verbose
        super().__init__(address, partial(_Handler, directory=str(site.out)))

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that goes away mid-answer (a closed tab, `curl | head`) is no error of the server: the base
        class printed a whole BrokenPipeError traceback to the log for each one. Other errors are logged, one line."""
        error = sys.exc_info()[1]
        if isinstance(error, (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)):
            return
        self.site.log(f"error while answering {client_address[0]}: {type(error).__name__}: {error}")

    @property
    def url(self) -> str:
        """The address to open in a browser."""
        host, port = self.server_address[:2]
        host = f"[{host}]" if ":" in str(host) else host
        return f"http://{host}:{port}/"


def is_loopback(host: str) -> bool:
    """Whether `host` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def make_server(store: Any, host: str = "127.0.0.1", port: int = 8000, out: str | Path | None = None,
                log: Callable[[str], object] = print, verbose: bool = False, **options: Any) -> DashboardServer:
    """Bind the server (port 0 picks a free one), then build the site once; a taken port or a host that is no
    address here is a UserError, said before the site is built (a large history takes a while)."""
    plotly_js()  # a missing plotly is said before a temporary folder is made
    folder = Path(out) if out else Path(tempfile.mkdtemp(prefix="modelci-site-"))
    try:
        site = LiveSite(store, folder, log=log, **options)
        try:
            server = DashboardServer((host, port), site, verbose=verbose)
        except socket.gaierror as exc:
            raise UserError(f"cannot listen on {host!r}: it is no address of this machine ({exc.strerror}); give "
                            "--host 127.0.0.1 (this machine only) or 0.0.0.0 (every interface)") from None
        except OSError as exc:
            raise UserError(f"cannot listen on {host}:{port}: {exc.strerror}; pick another --port (0 takes a free "
                            "one) or --host") from None
        try:
            site.refresh()
        except BaseException:
            server.server_close()
            raise
    except BaseException:
        if not out:  # the temporary folder goes with the server that never served it
            shutil.rmtree(folder, ignore_errors=True)
        raise
    return server


def serve_forever(server: DashboardServer, cleanup: bool) -> None:
    """Serve until Ctrl-C, then close and remove a temporary site folder."""
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        server.server_close()
        if cleanup:
            # give in-flight requests a moment before their files go away
            time.sleep(0.1)
            shutil.rmtree(server.site.out, ignore_errors=True)
