"""Kafka over TLS, for real: a tansu broker behind a TLS terminator that requires a client
certificate (tests/tls_terminator.py; neither embedded broker serves TLS itself), with
certificates the test makes (a CA, a server certificate for 127.0.0.1, a client certificate
whose key is encrypted with a password).

* team_scores (Kafka -> SparkRunner streaming -> Kafka) over TLS writes the same panes as the
  same job over plaintext;
* its logs, streaming report, Spark configuration (the event log's environment) and
  checkpoint files hold no trace of the client key's password, given by environment variable;
* a client without the CA, or without the client certificate, is refused at once with an
  error that names the setting.
"""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path
from types import SimpleNamespace

import apache_beam as beam
import pytest

from kafka_fixtures import KafkaTestHelper, recent_base_seconds
from kafka_jobs import (PARTITIONS, PER_PARTITION, finish_job, game_records, log_tail,
                        start_job, team_scores_command, topic_panes)
from services.broker import EmbeddedBroker
from tls_certificates import make_certificates
from tls_terminator import TlsTerminator, reserve_port
from transforms.kafka import KafkaSecurityError, ReadFromKafka
from transforms.kafka.offsets import create_consumer
from transforms.kafka.security import KafkaSecurity

PASSWORD_VARIABLE = "BEAM_TEST_CLIENT_KEY_PASSWORD"


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    """A plaintext tansu broker and a TLS one (behind the terminator), and the certificates."""
    password = f"key-password-{secrets.token_hex(12)}"
    certificates = make_certificates(tmp_path_factory.mktemp("certificates"), password)
    os.environ[PASSWORD_VARIABLE] = password
    try:
        security = KafkaSecurity.of(
            "SSL", ssl_cafile=certificates.ca, ssl_certfile=certificates.client_cert,
            ssl_keyfile=certificates.client_key, ssl_password_env=PASSWORD_VARIABLE)
        with TlsTerminator(reserve_port(), certificates.server_cert, certificates.server_key,
                           client_ca=certificates.ca) as terminator, \
                EmbeddedBroker(kind="tansu", port=terminator.upstream_port,
                               advertised_port=terminator.port,
                               client_config=security.client_kwargs()) as tls_broker, \
                EmbeddedBroker(kind="tansu") as plain_broker:
            yield SimpleNamespace(password=password, certificates=certificates,
                                  security=security, terminator=terminator,
                                  servers=tls_broker.bootstrap_servers,
                                  plain_servers=plain_broker.bootstrap_servers)
    finally:
        os.environ.pop(PASSWORD_VARIABLE, None)


def _security_options(certificates) -> list:
    return ["--security_protocol", "SSL", "--ssl_cafile", certificates.ca,
            "--ssl_certfile", certificates.client_cert, "--ssl_keyfile", certificates.client_key,
            "--ssl_password_env", PASSWORD_VARIABLE]


def _files_holding(root: Path, needle: bytes) -> list:
    return [str(path) for path in root.rglob("*") if path.is_file()
            and needle in path.read_bytes()]


def test_team_scores_over_tls_writes_the_panes_of_plaintext_and_leaks_no_secret(tls, tmp_path,
                                                                                 caplog):
    records = game_records(recent_base_seconds(), PARTITIONS, PER_PARTITION)
    runs = {}
    for name, servers, client_config in (
            ("plaintext", tls.plain_servers, {}),
            ("tls", tls.servers, tls.security.client_kwargs())):
        kafka = KafkaTestHelper(servers, f"tls-{name}", client_config)
        source = kafka.create_topic(partitions=PARTITIONS)
        output = kafka.create_topic(partitions=1)
        kafka.produce(source, records)
        command = team_scores_command(kafka, source, output, tmp_path / f"{name}-checkpoints",
                                      exactly_once=False)
        if name == "tls":
            events = tmp_path / "spark-events"
            events.mkdir()
            command += [*_security_options(tls.certificates),
                        "--streaming_report", str(tmp_path / "report.jsonl"),
                        "--spark_conf", "spark.eventLog.enabled=true",
                        # Uncompressed (Spark 4 compresses it by default), to be searched.
                        "--spark_conf", "spark.eventLog.compress=false",
                        "--spark_conf", f"spark.eventLog.dir=file://{events}"]
        log_path = tmp_path / f"{name}.log"
        started = time.monotonic()
        finish_job(start_job(command, log_path), log_path)
        runs[name] = (topic_panes(servers, output, committed_only=False, client_config=client_config),
                      time.monotonic() - started)
    (plain, plain_seconds), (over_tls, tls_seconds) = runs["plaintext"], runs["tls"]
    assert plain, log_tail(tmp_path / "plaintext.log")
    assert over_tls == plain, (f"plaintext {plain_seconds:.1f} s, TLS {tls_seconds:.1f} s\n"
                               f"{log_tail(tmp_path / 'tls.log')}")

    # Everything the TLS run left behind; each part must exist, or the scan proves nothing.
    secret = tls.password.encode()
    report = (tmp_path / "report.jsonl").read_text()
    assert report.count("\n") >= 2, "one JSON line per micro-batch"
    assert list((tmp_path / "tls-checkpoints").rglob("*")), "the run checkpointed"
    event_log = b"".join(path.read_bytes() for path in (tmp_path / "spark-events").rglob("*")
                         if path.is_file())
    assert b'"Spark Properties"' in event_log and b"spark.app.name" in event_log, \
        "the event log records Spark's configuration (the UI's environment tab)"
    assert _files_holding(tmp_path, secret) == []
    assert tls.password not in caplog.text


def test_a_client_without_the_ca_or_the_client_certificate_is_refused_at_once(tls, caplog):
    cases = [
        (KafkaSecurity.of("SSL"), "does not verify with no ssl_cafile"),
        (KafkaSecurity.of("SSL", ssl_cafile=tls.certificates.other_ca),
         "does not verify with ssl_cafile="),
        (KafkaSecurity.of("SSL", ssl_cafile=tls.certificates.ca),
         r"may require a client certificate \(ssl_certfile, ssl_keyfile\)"),
    ]
    for security, message in cases:
        started = time.monotonic()
        with pytest.raises(KafkaSecurityError, match=message):
            create_consumer([tls.servers], None, security.client_kwargs(), security)
        assert time.monotonic() - started < 5, "refused at once, not after retries"
    # The whole client: a bounded read on Beam's DirectRunner fails with the same message.
    with pytest.raises(Exception, match="does not verify with no ssl_cafile"):
        with beam.Pipeline() as pipeline:
            _ = pipeline | ReadFromKafka(tls.servers, "any", bounded=True,
                                         security=KafkaSecurity.of("SSL"))
    # With everything given, the same path works: the failures above are the settings.
    consumer = create_consumer([tls.servers], None, tls.security.client_kwargs(), tls.security)
    try:
        assert isinstance(consumer.topics(), set)
    finally:
        consumer.close()
    assert tls.password not in caplog.text


def test_a_wrong_key_password_is_an_error_that_names_where_it_came_from(tls, monkeypatch):
    monkeypatch.setenv(PASSWORD_VARIABLE, "not-the-password")
    with pytest.raises(KafkaSecurityError, match=f"environment variable {PASSWORD_VARIABLE}") \
            as raised:
        create_consumer([tls.servers], None, {}, tls.security)
    assert "not-the-password" not in str(raised.value)
