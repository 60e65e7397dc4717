"""Certificates for the TLS tests, made by the test (``cryptography``): nothing downloaded.

:func:`make_certificates` writes, into a directory: a CA, a server certificate for IP
127.0.0.1 signed by it, and a client certificate signed by it whose key is encrypted with a
password (the secret the leak test looks for).
"""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path
from typing import NamedTuple


class Certificates(NamedTuple):
    ca: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str  # encrypted with the password given to make_certificates
    other_ca: str  # a CA that signed nothing here: verifies no one


def _key():
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def _name(common_name: str):
    from cryptography.x509.oid import NameOID
    from cryptography import x509

    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _certificate(subject: str, key, issuer: str, issuer_key, ca: bool, ip: bool = False):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes

    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder()
               .subject_name(_name(subject)).issuer_name(_name(issuer))
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=2))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, content_commitment=False, key_encipherment=False,
            data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
            encipher_only=False, decipher_only=False), critical=True)
        builder = builder.add_extension(
            x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    else:
        builder = builder.add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
            issuer_key.public_key()), critical=False)
    if ip:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _write(path: Path, certificate=None, key=None, password: bytes = b"") -> str:
    from cryptography.hazmat.primitives import serialization

    if certificate is not None:
        path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    else:
        encryption = (serialization.BestAvailableEncryption(password) if password
                      else serialization.NoEncryption())
        path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8, encryption))
    return str(path)


def make_certificates(directory: Path, client_key_password: str) -> Certificates:
    """Write the CA, server and client files into ``directory``; return their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, other_key, server_key, client_key = _key(), _key(), _key(), _key()
    ca = _certificate("beam-test-ca", ca_key, "beam-test-ca", ca_key, ca=True)
    other = _certificate("other-ca", other_key, "other-ca", other_key, ca=True)
    server = _certificate("127.0.0.1", server_key, "beam-test-ca", ca_key, ca=False, ip=True)
    client = _certificate("beam-test-client", client_key, "beam-test-ca", ca_key, ca=False)
    return Certificates(
        ca=_write(directory / "ca.pem", ca),
        server_cert=_write(directory / "server.pem", server),
        server_key=_write(directory / "server.key", key=server_key),
        client_cert=_write(directory / "client.pem", client),
        client_key=_write(directory / "client.key", key=client_key,
                          password=client_key_password.encode()),
        other_ca=_write(directory / "other-ca.pem", other))
