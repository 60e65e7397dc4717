"""The jobs' Kafka security options (TLS, SASL), named as kafka-python names the settings.

Secrets are never options' values: ``--sasl_password_env NAME`` / ``--sasl_password_file
PATH`` (and ``--ssl_password_*``, ``--sasl_oauth_token_*``) name where the job reads them,
on the driver and on every executor, when a Kafka client is made. A command line, a shell's
history and ``ps`` therefore never show one.

>>> import argparse
>>> parser = argparse.ArgumentParser()
>>> add_kafka_security_options(parser)
>>> args = parser.parse_args(["--security_protocol", "SSL", "--ssl_cafile", __file__])
>>> kafka_security(args).security_protocol
'SSL'
>>> kafka_security(parser.parse_args([])) is None
True
"""

from __future__ import annotations

import argparse
from typing import List, Optional

from transforms.kafka.security import (SASL_MECHANISMS, SECURITY_PROTOCOLS, KafkaSecurity,
                                       KafkaSecurityError)

__all__ = ["SECURITY_OPTIONS", "add_kafka_security_options", "given_security_options",
           "kafka_security"]

#: The options' names, as KafkaSecurity.of takes them.
SECURITY_OPTIONS = ("security_protocol", "ssl_cafile", "ssl_certfile", "ssl_keyfile",
                    "ssl_check_hostname", "ssl_password_env", "ssl_password_file",
                    "sasl_mechanism", "sasl_plain_username", "sasl_password_env",
                    "sasl_password_file", "sasl_oauth_token_env", "sasl_oauth_token_file")


def _on_off(text: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "yes", "1", "on"):
        return True
    if value in ("false", "no", "0", "off"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r}: use true or false")


def add_kafka_security_options(group) -> None:
    """Add the security options to ``group`` (an argparse parser or argument group)."""
    group.add_argument("--security_protocol", type=str.upper, choices=SECURITY_PROTOCOLS,
                       help="how clients reach the brokers (default: PLAINTEXT)")
    group.add_argument("--ssl_cafile", metavar="PEM",
                       help="CA certificate(s) that verify the brokers (default: the system's)")
    group.add_argument("--ssl_certfile", metavar="PEM",
                       help="client certificate, for brokers that require one")
    group.add_argument("--ssl_keyfile", metavar="PEM", help="the client certificate's key")
    group.add_argument("--ssl_check_hostname", type=_on_off, metavar="true|false",
                       help="check the broker's certificate names its host (default: true)")
    group.add_argument("--ssl_password_env", metavar="VARIABLE",
                       help="environment variable holding the client key's password")
    group.add_argument("--ssl_password_file", metavar="PATH",
                       help="file holding the client key's password")
    group.add_argument("--sasl_mechanism", type=str.upper, choices=SASL_MECHANISMS,
                       help="SASL mechanism (with SASL_PLAINTEXT or SASL_SSL)")
    group.add_argument("--sasl_plain_username", metavar="USER",
                       help="SASL username (PLAIN, SCRAM-SHA-256/512)")
    group.add_argument("--sasl_password_env", metavar="VARIABLE",
                       help="environment variable holding the SASL password")
    group.add_argument("--sasl_password_file", metavar="PATH",
                       help="file holding the SASL password")
    group.add_argument("--sasl_oauth_token_env", metavar="VARIABLE",
                       help="environment variable holding the OAUTHBEARER token")
    group.add_argument("--sasl_oauth_token_file", metavar="PATH",
                       help="file holding the OAUTHBEARER token (read at every connection)")


def given_security_options(args: argparse.Namespace) -> List[str]:
    """The security options given on the command line, as ``--name``."""
    return [f"--{name}" for name in SECURITY_OPTIONS if getattr(args, name, None) is not None]


def kafka_security(args: argparse.Namespace) -> Optional[KafkaSecurity]:
    """The validated settings of parsed ``args`` (None if no security option is given);
    KafkaSecurityError names a wrong one."""
    if not given_security_options(args):
        return None
    given = {name: getattr(args, name) for name in SECURITY_OPTIONS
             if getattr(args, name, None) is not None}
    given.setdefault("security_protocol", "PLAINTEXT")
    try:
        return KafkaSecurity.of(**given)
    except KafkaSecurityError as error:
        raise KafkaSecurityError(f"Kafka security options: {error}") from None
