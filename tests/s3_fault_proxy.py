"""A fault-injecting HTTP reverse proxy for tests: loopback, in front of an S3-protocol server.

Object stores fail transiently (503 SlowDown under load, 500 InternalError, a connection
reset mid-upload) and permanently (403 AccessDenied). To test what the runner does then with
a real S3 server in the way, not a mock of the filesystem, tests point the S3 client at this
proxy: it forwards each request to the upstream (moto's server, ``cluster_fixtures``)
unchanged, Host header included (the SigV4 signature covers it, and moto checks it when
told to), and answers some requests itself as its rules (:class:`S3FaultProxy`) say,
counting what it did.
"""

from __future__ import annotations

import http.client
import os
import socket
import struct
import threading
import uuid
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, List, Optional, Set, Tuple
from urllib.parse import urlsplit

#: Headers about one hop, not the request: the proxy sets them on each side itself.
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "expect", "proxy-connection",
               "content-length"}
_MESSAGES = {"SlowDown": "Please reduce your request rate.",
             "InternalError": "We encountered an internal error. Please try again.",
             "AccessDenied": "Access Denied"}
#: The status ``_decide`` gives a request whose connection is to be reset.
RESET = 0


class S3FaultProxy:
    """Forward HTTP on ``127.0.0.1:<free port>`` (:attr:`endpoint`) to ``upstream_url``.

    The rules, checked in this order: :meth:`fail_all_with` (every request);
    ``every_nth_put_503`` (every Nth PUT since construction: 503 SlowDown); ``reset_puts``
    (the next K PUTs: connection reset mid-body); ``internal_errors`` (the next K requests:
    500 InternalError). An answered request has its body read first, so the client's
    keep-alive connection stays usable, as it does with S3.
    """

    def __init__(self, upstream_url: str, every_nth_put_503: int = 0, reset_puts: int = 0,
                 internal_errors: int = 0) -> None:
        upstream = urlsplit(upstream_url)
        self.upstream: Tuple[str, int] = (upstream.hostname or "127.0.0.1", upstream.port or 80)
        self._lock = threading.Lock()
        self._requests: Counter = Counter()
        self._injected: Counter = Counter({"503": 0, "500": 0, "reset": 0})
        self._puts = 0
        self._permanent: Optional[Tuple[int, str]] = None
        self.every_nth_put_503, self.reset_puts, self.internal_errors = 0, 0, 0
        self.set_faults(every_nth_put_503, reset_puts, internal_errors)
        self._server = _Server(self)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        # A short poll: shutdown() waits for it, and tests start and stop proxies often.
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,),
                                        daemon=True, name=f"s3-fault-proxy {self.endpoint}")
        self._started = self._stopped = False

    def set_faults(self, every_nth_put_503: Optional[int] = None,
                   reset_puts: Optional[int] = None,
                   internal_errors: Optional[int] = None) -> None:
        """Change the rules given (not None); the others stay as they are."""
        with self._lock:
            if every_nth_put_503 is not None:
                self.every_nth_put_503 = every_nth_put_503
            if reset_puts is not None:
                self.reset_puts = reset_puts
            if internal_errors is not None:
                self.internal_errors = internal_errors

    def fail_all_with(self, status: int, code: str) -> None:
        """Answer every request ``status`` with S3 error ``code`` until :meth:`clear`."""
        with self._lock:
            self._permanent = (status, code)

    def clear(self) -> None:
        """No more faults (the counts stay)."""
        self.set_faults(0, 0, 0)
        with self._lock:
            self._permanent = None

    @property
    def requests(self) -> Dict[str, int]:
        """Requests received, per method."""
        with self._lock:
            return dict(self._requests)

    @property
    def injected(self) -> Dict[str, int]:
        """Faults injected: ``"503"``, ``"500"``, ``"reset"`` (and a permanent status)."""
        with self._lock:
            return dict(self._injected)

    def _decide(self, method: str) -> Optional[Tuple[int, str]]:
        """None to forward this request, else (status, S3 error code), or (RESET, "")."""
        with self._lock:
            self._requests[method] += 1
            self._puts += method == "PUT"
            fault: Optional[Tuple[int, str]] = self._permanent
            if fault is None and method == "PUT":
                if self.every_nth_put_503 and self._puts % self.every_nth_put_503 == 0:
                    fault = (503, "SlowDown")
                elif self.reset_puts > 0:
                    self.reset_puts -= 1
                    fault = (RESET, "")
            if fault is None and self.internal_errors > 0:
                self.internal_errors -= 1
                fault = (500, "InternalError")
            if fault is not None:
                self._injected["reset" if fault[0] == RESET else str(fault[0])] += 1
            return fault

    def start(self) -> S3FaultProxy:
        self._started = True
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop accepting, cut every client connection, join every thread."""
        if self._stopped:
            return
        self._stopped = True
        if self._started:
            self._server.shutdown()
            self._thread.join()
        with self._lock:
            connections = list(self._server.connections)
        for connection in connections:  # wakes the handlers waiting on a keep-alive read
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._server.server_close()  # closes the listener, joins the handler threads

    def __enter__(self) -> S3FaultProxy:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class _Server(ThreadingHTTPServer):
    daemon_threads = False  # so that server_close() joins the handler threads

    def __init__(self, proxy: S3FaultProxy) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.proxy = proxy
        self.connections: Set[socket.socket] = set()

    # Tracked from accept, not from the handler thread's start, so stop() misses none.
    def process_request(self, request, client_address) -> None:  # type: ignore[override]
        with self.proxy._lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request) -> None:  # type: ignore[override]
        with self.proxy._lock:
            self.connections.discard(request)
        super().shutdown_request(request)


class _Handler(BaseHTTPRequestHandler):
    # HTTP/1.1: keep-alive, and "100 Continue" to botocore's "Expect: 100-continue"
    # (handle_expect_100), without which botocore waits a second before each upload's body.
    protocol_version = "HTTP/1.1"
    timeout = 30
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _read_body(self, limit: Optional[int] = None) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while (size := int(self.rfile.readline().split(b";")[0], 16)) > 0:
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length if limit is None else min(limit, length))

    def _reply(self, status: int, reason: str, headers: List[Tuple[str, str]],
               body: bytes) -> None:
        lines = [f"HTTP/1.1 {status} {reason}", *(f"{name}: {value}" for name, value in headers)]
        if self.command != "HEAD" and status not in (204, 304):  # HEAD keeps the upstream's
            lines.append(f"Content-Length: {len(body)}")
        if self.close_connection:
            lines.append("Connection: close")
        self.wfile.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
                         + (body if self.command != "HEAD" else b""))

    def _handle(self) -> None:
        fault = self.server.proxy._decide(self.command)
        if fault is not None and fault[0] == RESET:
            self._read_body(limit=max(1, int(self.headers.get("Content-Length") or 0) // 2))
            # Linger 0: closing sends RST, not FIN, so the client sees ECONNRESET. Detached,
            # as rfile and wfile would keep the descriptor open past the socket's close().
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            os.close(self.connection.detach())
            self.close_connection = True
            return
        body = self._read_body()
        if fault is not None:
            status, code = fault
            request_id = uuid.uuid4().hex[:16].upper()
            error = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
                     f'<Message>{_MESSAGES.get(code, code)}</Message><RequestId>{request_id}'
                     '</RequestId><HostId>s3-fault-proxy</HostId></Error>').encode()
            reason = "Slow Down" if code == "SlowDown" else http.client.responses.get(status, code)
            self._reply(status, reason, [("Content-Type", "application/xml"),
                                         ("x-amz-request-id", request_id)], error)
            return
        upstream = http.client.HTTPConnection(*self.server.proxy.upstream, timeout=self.timeout)
        try:
            upstream.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for name, value in self.headers.items():  # Host as received: the signature covers it
                if name.lower() not in _HOP_BY_HOP:
                    upstream.putheader(name, value)
            if body or self.command in ("PUT", "POST"):
                upstream.putheader("Content-Length", str(len(body)))
            upstream.endheaders(body)
            response = upstream.getresponse()
            payload = response.read()
        except (OSError, http.client.HTTPException) as error:
            self.close_connection = True
            self._reply(502, "Bad Gateway", [], f"upstream: {error!r}".encode())
            return
        finally:
            upstream.close()
        self._reply(response.status, response.reason,
                    [(name, value) for name, value in response.getheaders()
                     if name.lower() not in _HOP_BY_HOP
                     or (self.command == "HEAD" and name.lower() == "content-length")], payload)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle
