"""Notifiers behind a proxy: the webhook goes through `http_proxy`/`https_proxy` (a CONNECT tunnel for https, the
absolute URL for http), logs in to the proxy when its URL holds a login, bypasses it for `no_proxy` hosts, and
keeps its one deadline for the whole delivery when the proxy is the slow part.

The proxy is a real forwarding proxy on loopback started by the test; the https receiver has a certificate from
a test CA (trustme) that the run trusts through SSL_CERT_FILE, as a CI runner trusts its company's CA.
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import trustme
from probes import TricklingReceiver, workload

#: the login of the proxy that asks for one (a password with characters the URL must quote)
LOGIN = ("ci-bot", "p@ss word")


class Receiver:
    """A webhook receiver on loopback (https with `context`), keeping the JSON bodies it was sent."""

    def __init__(self, context: ssl.SSLContext | None = None):
        self.posts: list[dict] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - the http.server spelling
                receiver.posts.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if context is not None:
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        scheme = "https" if context is not None else "http"
        # https by name, as a certificate names a host; http by address
        self.url = f"{scheme}://{'localhost' if context else '127.0.0.1'}:{self.server.server_port}/hooks/T0/secret"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _pipe(one: socket.socket, two: socket.socket) -> None:
    """Copy bytes both ways until each side has closed its half."""

    def copy(source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            try:
                sink.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    back = threading.Thread(target=copy, args=(two, one), daemon=True)
    back.start()
    copy(one, two)
    back.join(30)


class ForwardingProxy:
    """A real HTTP proxy on loopback: tunnels CONNECT, forwards a request sent with an absolute URL, and records
    each request line and the login it was given; with `login`, anything else gets 407."""

    def __init__(self, login: tuple[str, str] | None = None):
        self.seen: list[tuple[str, str]] = []
        self.logins: list[str | None] = []
        proxy = self
        wanted = "Basic " + base64.b64encode(":".join(login).encode()).decode() if login else None

        class Handler(BaseHTTPRequestHandler):
            def _admitted(self) -> bool:
                proxy.seen.append((self.command, self.path))
                proxy.logins.append(self.headers.get("Proxy-Authorization"))
                if wanted is not None and self.headers.get("Proxy-Authorization") != wanted:
                    self.send_response(407)
                    self.send_header("Proxy-Authenticate", 'Basic realm="probe"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return False
                return True

            def do_CONNECT(self):  # noqa: N802 - the http.server spelling
                if not self._admitted():
                    return
                host, port = self.path.rsplit(":", 1)
                with socket.create_connection((host, int(port)), timeout=30) as upstream:
                    self.send_response(200, "Connection established")
                    self.end_headers()
                    _pipe(self.connection, upstream)
                self.close_connection = True

            def do_POST(self):  # noqa: N802 - the http.server spelling
                if not self._admitted():
                    return
                target = urllib.parse.urlsplit(self.path)
                body = self.rfile.read(int(self.headers["Content-Length"]))
                upstream = http.client.HTTPConnection(target.hostname, target.port, timeout=30)
                kept = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "proxy-authorization")}
                upstream.request("POST", target.path or "/", body, kept)
                answer = upstream.getresponse()
                data = answer.read()
                upstream.close()
                self.send_response(answer.status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def ca(tmp_path):
    """A test CA; its certificate is the file the run trusts (SSL_CERT_FILE)."""
    authority = trustme.CA()
    authority.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    return authority, tmp_path / "ca.pem"


@pytest.fixture
def https_receiver(ca):
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca[0].issue_cert("localhost").configure_cert(context)
    receiver = Receiver(context)
    yield receiver
    receiver.close()


@pytest.fixture
def http_receiver():
    receiver = Receiver()
    yield receiver
    receiver.close()


@pytest.fixture
def proxy():
    server = ForwardingProxy()
    yield server
    server.close()


@pytest.fixture
def proxy_with_login():
    server = ForwardingProxy(login=LOGIN)
    yield server
    server.close()


def _notifying_project(project, url: str, ca_file=None, timeout: float = 30, **proxies: str):
    """A project whose one workload fails (an alarm opens, so the webhook fires) with the webhook at `url` and the
    proxy variables given (every other one unset, whatever the test's own environment holds)."""
    project.config(f'[[notify]]\nkind = "webhook"\nurl_env = "PROBE_HOOK"\ntimeout = {timeout:g}\nretries = 0\n')
    project.extra_env.update({"PROBE_HOOK": url, "http_proxy": "", "https_proxy": "", "no_proxy": "", **proxies})
    if ca_file is not None:
        project.extra_env["SSL_CERT_FILE"] = str(ca_file)
    project.workloads(workload("Broken", 'raise RuntimeError("opens an alarm")'))


def _delivered(project, done, receiver) -> None:
    """The run failed for its workload, the notification arrived whole, and nothing else went wrong."""
    assert done.returncode == 1, done.stderr
    assert "could not deliver" not in done.stdout + done.stderr, done.stdout[-2000:]
    assert len(receiver.posts) == 1, (receiver.posts, done.stdout[-2000:], done.stderr[-2000:])
    assert "suite/Broken" in receiver.posts[0]["text"]
    assert project.stored("SELECT status FROM runs") == [("complete",)]
    assert project.stored("SELECT count(*) FROM alarm_events WHERE event = 'notified'") == [(1,)]
    project.assert_clean(done)


def test_an_http_webhook_goes_through_http_proxy_with_its_absolute_url(project, proxy, http_receiver):
    _notifying_project(project, http_receiver.url, http_proxy=f"http://{proxy.address}")
    done = project.run()
    _delivered(project, done, http_receiver)
    assert proxy.seen == [("POST", http_receiver.url)]


def test_an_https_webhook_goes_through_a_connect_tunnel_of_https_proxy(project, proxy, https_receiver, ca):
    _notifying_project(project, https_receiver.url, ca[1], https_proxy=f"http://{proxy.address}")
    done = project.run()
    _delivered(project, done, https_receiver)
    port = https_receiver.server.server_port
    assert proxy.seen == [("CONNECT", f"localhost:{port}")]  # the proxy saw where, never what: TLS end to end


def test_the_proxy_login_in_its_url_is_sent_and_never_shown(project, proxy_with_login, https_receiver, ca):
    user, password = LOGIN
    url = f"http://{user}:{urllib.parse.quote(password, safe='')}@{proxy_with_login.address}"
    _notifying_project(project, https_receiver.url, ca[1], https_proxy=url)
    done = project.run()
    _delivered(project, done, https_receiver)
    assert [method for method, _ in proxy_with_login.seen] == ["CONNECT"]
    assert proxy_with_login.logins[0] == "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    assert "p@ss" not in done.stdout + done.stderr


def test_a_proxy_that_wants_a_login_it_was_not_given_is_named(project, proxy_with_login, http_receiver):
    _notifying_project(project, http_receiver.url, http_proxy=f"http://{proxy_with_login.address}")
    done = project.run()
    assert done.returncode == 1, done.stderr
    assert f"through the proxy {proxy_with_login.address}" in done.stdout + done.stderr
    assert "HTTP 407" in done.stdout + done.stderr
    assert http_receiver.posts == []
    assert project.stored("SELECT status FROM runs") == [("complete",)]
    project.assert_clean(done)


@pytest.mark.parametrize("no_proxy", ["localhost", "*", ".localhost,other.example"])
def test_no_proxy_hosts_are_reached_directly(project, proxy, https_receiver, ca, no_proxy):
    _notifying_project(project, https_receiver.url, ca[1], https_proxy=f"http://{proxy.address}",
                       no_proxy=no_proxy)
    done = project.run()
    _delivered(project, done, https_receiver)
    assert proxy.seen == []


def test_a_proxy_that_trickles_the_tunnel_is_given_up_at_the_timeout(project, https_receiver, ca):
    """The deadline covers the whole delivery, the proxy's answer to CONNECT included."""
    stalling = TricklingReceiver()
    try:
        address = stalling.url.split("/")[2]
        _notifying_project(project, https_receiver.url, ca[1], timeout=2, https_proxy=f"http://{address}")
        done = project.run()
        assert done.returncode == 1, done.stderr
        assert (f"through the proxy {address} gave no complete answer within the timeout of 2 s"
                in done.stdout + done.stderr)
        assert https_receiver.posts == []
        deadline = time.monotonic() + 30
        while not stalling.sent and time.monotonic() < deadline:
            time.sleep(0.05)
        assert stalling.sent and stalling.sent[0] < len(stalling.answer) // 2, stalling.sent
        project.assert_clean(done)
    finally:
        stalling.close()
