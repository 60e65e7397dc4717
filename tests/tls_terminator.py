"""A TLS terminator for tests: TLS on a loopback port, plaintext bytes to a broker behind it.

Neither embedded broker serves TLS here (tansu 0.6.0 has ``--cert`` and ``--key`` but refuses
the two together, and with either alone still speaks plaintext; noida has no TLS option), so
the TLS tests put this in front of a tansu broker that *advertises* the terminator's port
(``EmbeddedBroker(advertised_port=...)``): Kafka clients reconnect to the address in the
metadata, which then also goes through TLS.

With ``client_ca`` the terminator requires a client certificate signed by that CA (mutual
TLS), as a broker with ``ssl.client.auth=required`` does.
"""

from __future__ import annotations

import socket
import ssl
import threading
from typing import List, Optional

from services.processes import LOOPBACK, free_loopback_port


class TlsTerminator:
    """Threads on loopback: accept TLS on :attr:`port`, forward to ``upstream_port``."""

    def __init__(self, upstream_port: int, cert: str, key: str,
                 client_ca: Optional[str] = None) -> None:
        self.upstream_port = upstream_port
        self._context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._context.load_cert_chain(cert, key)
        if client_ca is not None:
            self._context.verify_mode = ssl.CERT_REQUIRED
            self._context.load_verify_locations(client_ca)
        self._listener = socket.create_server((LOOPBACK, 0))
        self.port = self._listener.getsockname()[1]
        self._closed = threading.Event()
        self._sockets: List[socket.socket] = []
        self._lock = threading.Lock()
        #: Handshakes that failed (a client without the CA or certificate), for assertions.
        self.refused = 0
        self._thread = threading.Thread(target=self._accept, daemon=True,
                                        name=f"tls-terminator-{self.port}")

    def __enter__(self) -> "TlsTerminator":
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            try:
                sock.close()
            except OSError:
                pass

    def _track(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        client.settimeout(10)
        try:
            secure = self._context.wrap_socket(client, server_side=True)
        except (ssl.SSLError, OSError):
            self.refused += 1
            client.close()
            return
        secure.settimeout(None)
        try:
            upstream = socket.create_connection((LOOPBACK, self.upstream_port), timeout=5)
        except OSError:
            secure.close()
            return
        upstream.settimeout(None)
        self._track(secure)
        self._track(upstream)
        threading.Thread(target=self._pump, args=(upstream, secure), daemon=True).start()
        self._pump(secure, upstream)

    @staticmethod
    def _pump(source: socket.socket, target: socket.socket) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                target.sendall(data)
        except (OSError, ValueError):
            pass
        finally:
            for sock in (source, target):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()


def reserve_port() -> int:
    """A free loopback port for the broker behind the terminator."""
    return free_loopback_port()
