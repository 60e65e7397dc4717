"""Kafka security settings (TLS, SASL) as kafka-python keyword arguments, secrets kept secret.

One :class:`KafkaSecurity` says how every client of a read or a write reaches the brokers,
named as kafka-python names the settings: ``security_protocol`` (PLAINTEXT, SSL,
SASL_PLAINTEXT, SASL_SSL), ``ssl_cafile``, ``ssl_certfile``, ``ssl_keyfile``,
``ssl_check_hostname``, ``sasl_mechanism``, ``sasl_plain_username``.

Secrets (the SASL password, the client key's password, an OAuth token) are never values here:
only *references* to them, an environment variable's name (``*_env``) or a file's path
(``*_file``). A KafkaSecurity is what gets pickled into Spark tasks, so a secret's value never
is; :meth:`KafkaSecurity.client_kwargs` reads it where a client is made, on the worker, and
hands it straight to kafka-python. Nothing here puts a secret's value into a message or a repr.

A wrong setting fails early with a :class:`KafkaSecurityError` that names it: when the
settings are built (unknown protocol or mechanism, a missing or unreadable file, an unset
variable) and, for TLS, before the first client of a process is made
(:func:`check_tls_path`: one handshake and one ApiVersions request, so a CA that does not
verify the broker, a refused client certificate or a plaintext port is an error in seconds,
not a client retrying forever).

>>> import os
>>> os.environ["DOC_KAFKA_PASSWORD"] = "s3cret"
>>> security = KafkaSecurity.of(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
...                             sasl_plain_username="alice",
...                             sasl_password_env="DOC_KAFKA_PASSWORD")
>>> security
KafkaSecurity(security_protocol='SASL_PLAINTEXT', sasl_mechanism='PLAIN', sasl_plain_username='alice', sasl_password=SecretRef(env='DOC_KAFKA_PASSWORD'))
>>> sorted(security.client_kwargs().items())
[('sasl_mechanism', 'PLAIN'), ('sasl_plain_password', 's3cret'), ('sasl_plain_username', 'alice'), ('security_protocol', 'SASL_PLAINTEXT')]

In a pipeline: ``ReadFromKafka(servers, topic, security=security)`` and
``WriteToKafka(servers, topic, security=security)``; on a job's command line the same names
as options (``--security_protocol SSL --ssl_cafile ca.pem``; see docs/SECURITY.md).
"""

from __future__ import annotations

import errno
import os
import socket
import ssl
import struct
import threading
from typing import Any, Dict, NamedTuple, Optional, Sequence, Tuple

__all__ = ["KafkaSecurity", "KafkaSecurityError", "SecretRef", "SECURITY_PROTOCOLS",
           "SASL_MECHANISMS", "SECRET_CLIENT_KEYS", "SECURITY_CLIENT_KEYS", "as_security",
           "check_tls_path"]

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
#: kafka-python settings that hold a secret's value: never accepted in consumer_config /
#: producer_config, which are pickled into tasks (pass a reference through KafkaSecurity).
SECRET_CLIENT_KEYS = ("sasl_plain_password", "ssl_password")
#: kafka-python settings a KafkaSecurity sets.
SECURITY_CLIENT_KEYS = ("security_protocol", "ssl_cafile", "ssl_certfile", "ssl_keyfile",
                        "ssl_check_hostname", "sasl_mechanism", "sasl_plain_username",
                        "sasl_oauth_token_provider") + SECRET_CLIENT_KEYS
#: Seconds the TLS check waits for the handshake and the broker's answer.
TLS_CHECK_SECONDS = 10.0


class KafkaSecurityError(ValueError):
    """A Kafka security setting is wrong (the message names it); retrying does not help."""


class SecretRef(NamedTuple):
    """Where a secret is: an environment variable (``env``) or a file (``file``, its whole
    content less a trailing newline). Its repr shows the name or path only."""

    env: Optional[str] = None
    file: Optional[str] = None

    def __repr__(self) -> str:
        return f"SecretRef(env={self.env!r})" if self.env else f"SecretRef(file={self.file!r})"

    def where(self) -> str:
        return (f"the environment variable {self.env}" if self.env
                else f"the file {self.file}")

    def resolve(self, option: str) -> str:
        """The secret's value; KafkaSecurityError (naming ``option`` and where, never a value)
        if it cannot be read."""
        if self.env:
            value = os.environ.get(self.env)
            if not value:
                raise KafkaSecurityError(
                    f"{option}_env={self.env}: the environment variable {self.env} is not set "
                    "(or empty) in this process; set it on the driver and on every executor")
            return value
        try:
            with open(self.file, encoding="utf-8") as handle:
                value = handle.read().rstrip("\r\n")
        except OSError as error:
            raise KafkaSecurityError(
                f"{option}_file={self.file}: cannot read it ({type(error).__name__}: "
                f"{error.strerror or error}); it must be readable at that path on the driver "
                "and on every executor") from None
        if not value:
            raise KafkaSecurityError(f"{option}_file={self.file} is empty")
        return value


def _reference(option: str, env: Optional[str], file: Optional[str]) -> Optional[SecretRef]:
    if env and file:
        raise KafkaSecurityError(f"{option}_env and {option}_file are both given: pass one")
    if env is not None and not (isinstance(env, str) and env):
        raise KafkaSecurityError(f"{option}_env={env!r}: give an environment variable's name")
    if file is not None and not (isinstance(file, str) and file):
        raise KafkaSecurityError(f"{option}_file={file!r}: give a file's path")
    return SecretRef(env=env) if env else SecretRef(file=file) if file else None


def _readable(option: str, path: Optional[str]) -> None:
    if path is None:
        return
    if not isinstance(path, str) or not path:
        raise KafkaSecurityError(f"{option}={path!r}: give a file's path")
    try:
        with open(path, "rb") as handle:
            handle.read(1)
    except OSError as error:
        raise KafkaSecurityError(
            f"{option}={path}: cannot read it ({type(error).__name__}: "
            f"{error.strerror or error}); it must be readable at that path on the driver and "
            "on every executor") from None


class KafkaSecurity(NamedTuple):
    """How clients reach the brokers; build it with :meth:`of` (which validates).

    Picklable, and holds no secret's value: only :class:`SecretRef` references.
    """

    security_protocol: str = "PLAINTEXT"
    ssl_cafile: Optional[str] = None
    ssl_certfile: Optional[str] = None
    ssl_keyfile: Optional[str] = None
    ssl_check_hostname: bool = True
    ssl_password: Optional[SecretRef] = None
    sasl_mechanism: Optional[str] = None
    sasl_plain_username: Optional[str] = None
    sasl_password: Optional[SecretRef] = None
    sasl_oauth_token: Optional[SecretRef] = None

    def __repr__(self) -> str:
        fields = [f"{name}={value!r}" for name, value in zip(self._fields, self)
                  if value != self._field_defaults[name]]
        return f"KafkaSecurity({', '.join(fields)})"

    @classmethod
    def of(cls, security_protocol: str = "PLAINTEXT", *, ssl_cafile: Optional[str] = None,
           ssl_certfile: Optional[str] = None, ssl_keyfile: Optional[str] = None,
           ssl_check_hostname: bool = True, ssl_password_env: Optional[str] = None,
           ssl_password_file: Optional[str] = None, sasl_mechanism: Optional[str] = None,
           sasl_plain_username: Optional[str] = None, sasl_password_env: Optional[str] = None,
           sasl_password_file: Optional[str] = None,
           sasl_oauth_token_env: Optional[str] = None,
           sasl_oauth_token_file: Optional[str] = None) -> "KafkaSecurity":
        """Validated settings; KafkaSecurityError names the first wrong one.

        Files must be readable and referenced secrets present now (on the driver): a mistake
        shows when the pipeline is built, not in a task.
        """
        protocol = str(security_protocol).upper()
        if protocol not in SECURITY_PROTOCOLS:
            raise KafkaSecurityError(
                f"security_protocol={security_protocol!r} is unknown: use one of "
                f"{', '.join(SECURITY_PROTOCOLS)}")
        tls, sasl = protocol in ("SSL", "SASL_SSL"), protocol.startswith("SASL_")
        ssl_password = _reference("ssl_password", ssl_password_env, ssl_password_file)
        sasl_password = _reference("sasl_password", sasl_password_env, sasl_password_file)
        oauth = _reference("sasl_oauth_token", sasl_oauth_token_env, sasl_oauth_token_file)
        tls_given = [name for name, value in (
            ("ssl_cafile", ssl_cafile), ("ssl_certfile", ssl_certfile),
            ("ssl_keyfile", ssl_keyfile), ("ssl_password", ssl_password)) if value is not None]
        if tls_given and not tls:
            raise KafkaSecurityError(
                f"{', '.join(tls_given)} given with security_protocol={protocol}: TLS settings "
                "need security_protocol SSL or SASL_SSL")
        sasl_given = [name for name, value in (
            ("sasl_mechanism", sasl_mechanism), ("sasl_plain_username", sasl_plain_username),
            ("sasl_password", sasl_password), ("sasl_oauth_token", oauth)) if value is not None]
        if sasl_given and not sasl:
            raise KafkaSecurityError(
                f"{', '.join(sasl_given)} given with security_protocol={protocol}: SASL "
                "settings need security_protocol SASL_PLAINTEXT or SASL_SSL")
        if sasl:
            mechanism = str(sasl_mechanism or "").upper()
            if mechanism not in SASL_MECHANISMS:
                raise KafkaSecurityError(
                    f"sasl_mechanism={sasl_mechanism!r}: with security_protocol={protocol} use "
                    f"one of {', '.join(SASL_MECHANISMS)}")
            sasl_mechanism = mechanism
            if mechanism == "OAUTHBEARER":
                if oauth is None or sasl_password is not None or sasl_plain_username:
                    raise KafkaSecurityError(
                        "sasl_mechanism=OAUTHBEARER takes a token (sasl_oauth_token_env or "
                        "sasl_oauth_token_file), not a username and password")
            elif not sasl_plain_username or sasl_password is None or oauth is not None:
                raise KafkaSecurityError(
                    f"sasl_mechanism={mechanism} needs sasl_plain_username and a password "
                    "(sasl_password_env=VARIABLE or sasl_password_file=PATH)")
        if (ssl_certfile is None) != (ssl_keyfile is None) and ssl_keyfile is not None:
            raise KafkaSecurityError("ssl_keyfile is given without ssl_certfile: a client "
                                     "certificate needs both (or one PEM file with both as "
                                     "ssl_certfile)")
        if ssl_password is not None and ssl_certfile is None:
            raise KafkaSecurityError("ssl_password_* is the client key's password: give "
                                     "ssl_certfile (and ssl_keyfile) too")
        for option, path in (("ssl_cafile", ssl_cafile), ("ssl_certfile", ssl_certfile),
                             ("ssl_keyfile", ssl_keyfile)):
            _readable(option, path)
        security = cls(protocol, ssl_cafile, ssl_certfile, ssl_keyfile,
                       bool(ssl_check_hostname), ssl_password, sasl_mechanism if sasl else None,
                       sasl_plain_username or None, sasl_password, oauth)
        security.client_kwargs()  # every referenced secret is there
        return security

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    def client_kwargs(self) -> Dict[str, Any]:
        """The kafka-python keyword arguments, secrets read now from their references.

        Call it where the client is made, and pass the result to the client only: never
        keep, log or pickle it.
        """
        kwargs: Dict[str, Any] = {"security_protocol": self.security_protocol}
        if self.uses_tls:
            kwargs["ssl_check_hostname"] = self.ssl_check_hostname
            for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
                if getattr(self, name) is not None:
                    kwargs[name] = getattr(self, name)
            if self.ssl_password is not None:
                kwargs["ssl_password"] = self.ssl_password.resolve("ssl_password")
        if self.sasl_mechanism is not None:
            kwargs["sasl_mechanism"] = self.sasl_mechanism
            if self.sasl_oauth_token is not None:
                kwargs["sasl_oauth_token_provider"] = _token_provider(self.sasl_oauth_token)
            else:
                kwargs["sasl_plain_username"] = self.sasl_plain_username
                kwargs["sasl_plain_password"] = self.sasl_password.resolve("sasl_password")
        return kwargs

    def ssl_context(self) -> ssl.SSLContext:
        """A client TLS context as kafka-python builds one from these settings."""
        context = ssl.create_default_context(cafile=self.ssl_cafile)
        context.check_hostname = self.ssl_check_hostname
        if self.ssl_certfile is not None:
            password = (self.ssl_password.resolve("ssl_password")
                        if self.ssl_password is not None else None)
            try:
                context.load_cert_chain(self.ssl_certfile, self.ssl_keyfile, password)
            except ssl.SSLError as error:
                key = self.ssl_keyfile or self.ssl_certfile
                how = (f"with the password from {self.ssl_password.where()}"
                       if self.ssl_password is not None else "without a password "
                       "(ssl_password_env / ssl_password_file if the key is encrypted)")
                raise KafkaSecurityError(
                    f"ssl_certfile={self.ssl_certfile} / ssl_keyfile={key}: the client "
                    f"certificate and key do not load {how} ({error.reason or error})"
                ) from None
        return context


def as_security(value: Any) -> Optional[KafkaSecurity]:
    """None, a :class:`KafkaSecurity`, or a dict of :meth:`KafkaSecurity.of`'s arguments."""
    if value is None or isinstance(value, KafkaSecurity):
        return value
    if isinstance(value, dict):
        return KafkaSecurity.of(**value)
    raise TypeError(f"security must be a KafkaSecurity (KafkaSecurity.of(...)) or a dict of "
                    f"its arguments, got {type(value).__name__}")


def _token_provider(reference: SecretRef):
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class _ReferencedToken(AbstractTokenProvider):
        """Reads the token at every connection, so a rotated token file is picked up."""

        def token(self) -> str:
            return reference.resolve("sasl_oauth_token")

    return _ReferencedToken()


#: (servers, security) whose TLS path was checked in this process.
_CHECKED: set = set()
_CHECKED_LOCK = threading.Lock()


def _api_versions_request() -> bytes:
    # ApiVersions v0 (api key 18): a broker answers it on any connection, before SASL too.
    client_id = b"beam-tls-check"
    body = struct.pack(">hhih", 18, 0, 1, len(client_id)) + client_id
    return struct.pack(">i", len(body)) + body


def _receive(connection: ssl.SSLSocket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise ConnectionResetError("the connection closed before the broker answered")
        data += chunk
    return data


def check_tls_path(servers: Sequence[str], security: Optional[KafkaSecurity],
                   timeout_seconds: float = TLS_CHECK_SECONDS) -> None:
    """For TLS settings, one handshake and one ApiVersions request to the first server of
    ``servers`` that accepts a TCP connection (once per process and settings); raises
    :class:`KafkaSecurityError` saying which setting to check. A server no TCP connection
    reaches is left to the caller (the broker may be away for a while)."""
    if security is None or not security.uses_tls:
        return
    # Loaded every time (about a millisecond): a key password changed since is named here,
    # not by kafka-python as a connection that fails.
    context = security.ssl_context()
    key: Tuple = (tuple(servers), security)
    if key in _CHECKED:
        return
    for server in servers:
        host, _, port = server.rpartition(":")
        host = host.strip("[]")
        try:
            raw = socket.create_connection((host, int(port)), timeout=timeout_seconds)
        except OSError:
            continue
        try:
            _handshake(context, raw, host, server, security, timeout_seconds)
        finally:
            raw.close()
        with _CHECKED_LOCK:
            _CHECKED.add(key)
        return


def _handshake(context: ssl.SSLContext, raw: socket.socket, host: str, server: str,
               security: KafkaSecurity, timeout_seconds: float) -> None:
    stage = "the TLS handshake"
    try:
        with context.wrap_socket(raw, server_hostname=host) as connection:
            stage = "the broker's first answer over TLS"
            connection.sendall(_api_versions_request())
            size = struct.unpack(">i", _receive(connection, 4))[0]
            _receive(connection, min(size, 1 << 16))
    except ssl.SSLCertVerificationError as error:
        ca = (f"ssl_cafile={security.ssl_cafile}" if security.ssl_cafile
              else "no ssl_cafile (the system's CAs)")
        raise KafkaSecurityError(
            f"TLS to Kafka at {server}: the broker's certificate does not verify with {ca}: "
            f"{error.verify_message}. Pass the CA that signed the broker's certificate as "
            "ssl_cafile" + (", or ssl_check_hostname=False if only the name differs"
                            if "hostname" in str(error.verify_message) else "")) from None
    except ssl.SSLError as error:
        raise _tls_failed(server, stage, security, error.reason or error) from None
    except (socket.timeout, TimeoutError):
        raise KafkaSecurityError(
            f"TLS to Kafka at {server}: no answer to {stage} within {timeout_seconds:g} s: "
            f"is it a TLS listener? (security_protocol={security.security_protocol})"
        ) from None
    except OSError as error:
        if error.errno == errno.ECONNRESET:
            # A TLS 1.3 broker judges the client's certificate (or its absence) after the
            # client's side of the handshake, so its refusal comes at the first answer, and
            # the reset may overtake its alert: ssl reports that as SSLEOFError up to Python
            # 3.12 and as ConnectionResetError from 3.13 (CPython gh-115627). One message.
            raise _tls_failed(server, stage, security, error) from None
        raise KafkaSecurityError(
            f"TLS to Kafka at {server}: the broker closed the connection during {stage} "
            f"({type(error).__name__}: {error}): it refused the handshake (a client "
            "certificate it wants or does not trust?) or the port does not speak TLS"
        ) from None


def _tls_failed(server: str, stage: str, security: KafkaSecurity,
                reason: Any) -> KafkaSecurityError:
    client_cert = ("the client certificate (ssl_certfile/ssl_keyfile) was refused, or "
                   if security.ssl_certfile else
                   "the broker may require a client certificate (ssl_certfile, "
                   "ssl_keyfile), or ")
    return KafkaSecurityError(
        f"TLS to Kafka at {server}: {stage} failed ({reason}): "
        f"{client_cert}the port does not speak TLS (check security_protocol="
        f"{security.security_protocol} against the broker's listener)")


def as_security_error(error: BaseException, servers: Sequence[str],
                      security: Optional[KafkaSecurity]) -> Optional[KafkaSecurityError]:
    """The clear error for a kafka-python failure that a security setting causes (an
    authentication the broker refused), or None for any other failure."""
    from kafka.errors import SaslAuthenticationFailedError

    if not isinstance(error, SaslAuthenticationFailedError):
        return None
    who = "OAuth token" if security is not None and security.sasl_oauth_token else (
        f"sasl_plain_username={security.sasl_plain_username}" if security is not None
        else "no credentials")
    where = ""
    if security is not None:
        reference = security.sasl_oauth_token or security.sasl_password
        where = f" from {reference.where()}" if reference is not None else ""
    mechanism = security.sasl_mechanism if security is not None else None
    return KafkaSecurityError(
        f"SASL authentication failed at Kafka {','.join(servers)} (sasl_mechanism="
        f"{mechanism}, {who}): check the username and the secret{where}, and that the "
        f"broker enables {mechanism}")
