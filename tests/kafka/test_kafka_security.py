"""KafkaSecurity (transforms/kafka/security.py) and the jobs' security options, without a
broker: validation names the bad setting, the settings reach kafka-python as given, and a
secret's value is read only by reference, never kept, pickled or shown.

No broker here speaks SASL (tansu 0.6.0's --authentication answered kafka-python's PLAIN
with NoSharedMechanism and has no way to create SCRAM users on memory storage; noida has no
authentication), so SASL is checked here: the keyword arguments kafka-python's clients get.
"""

from __future__ import annotations

import base64
import bz2
import pickle

import apache_beam as beam
import pytest
from apache_beam.internal import pickler

from pipelines.options import job_parser, parse_job_options
from transforms.kafka import ReadFromKafka, WriteToKafka
from transforms.kafka.security import KafkaSecurity, KafkaSecurityError, SecretRef

SECRET = "pw-7f3a9c1e-not-in-any-output"


@pytest.fixture
def secret_env(monkeypatch):
    monkeypatch.setenv("TEST_KAFKA_SECRET", SECRET)
    return "TEST_KAFKA_SECRET"


def test_sasl_settings_reach_kafka_python_as_given(secret_env, tmp_path):
    security = KafkaSecurity.of("sasl_ssl", sasl_mechanism="scram-sha-512",
                                sasl_plain_username="alice", sasl_password_env=secret_env,
                                ssl_cafile=__file__, ssl_check_hostname=False)
    assert security.client_kwargs() == {
        "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "alice", "sasl_plain_password": SECRET,
        "ssl_cafile": __file__, "ssl_check_hostname": False}
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer

    for client in (KafkaConsumer, KafkaProducer, KafkaAdminClient):
        assert set(security.client_kwargs()) <= set(client.DEFAULT_CONFIG), client
    # The source's consumers get them merged into their settings.
    read = ReadFromKafka("127.0.0.1:9", "t", consumer_config={"fetch_max_wait_ms": 10},
                         security=security)
    assert read.config.client_config()["sasl_plain_password"] == SECRET
    assert read.config.client_config()["fetch_max_wait_ms"] == 10


def test_a_password_file_and_an_oauth_token_file_are_read_where_the_client_is_made(tmp_path):
    password = tmp_path / "password"
    password.write_text(SECRET + "\n")
    plain = KafkaSecurity.of("SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                             sasl_plain_username="bob", sasl_password_file=str(password))
    assert plain.client_kwargs()["sasl_plain_password"] == SECRET
    token = tmp_path / "token"
    token.write_text("token-1")
    oauth = KafkaSecurity.of("SASL_SSL", sasl_mechanism="OAUTHBEARER",
                             sasl_oauth_token_file=str(token))
    provider = oauth.client_kwargs()["sasl_oauth_token_provider"]
    from kafka.net.sasl.oauth import AbstractTokenProvider

    assert isinstance(provider, AbstractTokenProvider)
    assert provider.token() == "token-1"
    token.write_text("token-2")  # rotated: the next connection sends the new one
    assert provider.token() == "token-2"


@pytest.mark.parametrize("arguments, named", [
    (dict(security_protocol="TLS"), "security_protocol='TLS' is unknown"),
    (dict(security_protocol="SSL", ssl_cafile="/no/such/ca.pem"), "ssl_cafile=/no/such/ca.pem"),
    (dict(security_protocol="PLAINTEXT", ssl_cafile=__file__), "need security_protocol SSL"),
    (dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
          sasl_plain_username="a"), "needs sasl_plain_username and a password"),
    (dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="GSSAPI"),
     "sasl_mechanism='GSSAPI'"),
    (dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_plain_username="a",
          sasl_password_env="TEST_KAFKA_UNSET_VARIABLE"),
     "environment variable TEST_KAFKA_UNSET_VARIABLE is not set"),
    (dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_plain_username="a",
          sasl_password_file="/no/such/secret"), "sasl_password_file=/no/such/secret"),
    (dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_plain_username="a",
          sasl_password_env="A", sasl_password_file="B"), "both given"),
])
def test_a_wrong_setting_is_an_error_that_names_it(arguments, named, monkeypatch):
    monkeypatch.delenv("TEST_KAFKA_UNSET_VARIABLE", raising=False)
    with pytest.raises(KafkaSecurityError, match=named.replace("(", r"\(").replace("[", r"\[")):
        KafkaSecurity.of(**arguments)


def test_a_secret_value_in_the_client_settings_is_refused():
    with pytest.raises(ValueError, match=r"consumer_config sets \['sasl_plain_password'\]"):
        ReadFromKafka("127.0.0.1:9", "t", consumer_config={"sasl_plain_password": SECRET})
    with pytest.raises(ValueError, match=r"producer_config sets \['ssl_password'\]"):
        WriteToKafka("127.0.0.1:9", "t", producer_config={"ssl_password": SECRET})
    with pytest.raises(ValueError, match="security_protocol"):
        WriteToKafka("127.0.0.1:9", "t", producer_config={"security_protocol": "SSL"},
                     security=KafkaSecurity.of("SSL"))


def test_what_is_pickled_into_a_task_holds_the_reference_not_the_secret(secret_env):
    security = KafkaSecurity.of("SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                                sasl_plain_username="alice", sasl_password_env=secret_env)
    assert SECRET not in repr(security) and secret_env in repr(security)
    pipeline = beam.Pipeline()
    read = pipeline | ReadFromKafka("127.0.0.1:9", "in", security=security)
    _ = read.records | WriteToKafka("127.0.0.1:9", "out", exactly_once=True,
                                    security=security)
    # Beam's pickler (as the runner ships DoFns to tasks): base64 of bz2 of the pickle.
    payloads = [bz2.decompress(base64.b64decode(pickler.dumps(node.transform.fn)))
                for node in _applied(pipeline) if hasattr(node.transform, "fn")]
    assert len(payloads) >= 3  # resolve, read, write: each carries the settings
    for payload in payloads:
        assert SECRET.encode() not in payload
    # ...and they do carry the reference, so the search above looked at the right bytes.
    assert sum(secret_env.encode() in payload for payload in payloads) >= 3
    assert SECRET.encode() not in pickle.dumps(security)


def _applied(pipeline):
    found = []

    class Visitor(beam.pipeline.PipelineVisitor):
        def visit_transform(self, node):
            found.append(node)

    pipeline.visit(Visitor())
    return found


def test_secret_ref_and_errors_show_where_not_what(tmp_path, secret_env):
    assert repr(SecretRef(env=secret_env)) == f"SecretRef(env='{secret_env}')"
    key = tmp_path / "key.pem"
    key.write_text("not a key")
    security = KafkaSecurity.of("SSL", ssl_certfile=str(key), ssl_keyfile=str(key),
                                ssl_password_env=secret_env)
    with pytest.raises(KafkaSecurityError) as raised:
        security.ssl_context()
    assert "environment variable TEST_KAFKA_SECRET" in str(raised.value)
    assert SECRET not in str(raised.value)


def _parse(argv):
    parser = job_parser("team_scores", "t", window_seconds=60, early_seconds=0,
                        allowed_lateness=0)
    return parse_job_options(parser, argv)[0]


def test_the_jobs_take_the_security_options_beside_bootstrap_servers(secret_env):
    args = _parse(["--source", "kafka", "--bootstrap_servers", "127.0.0.1:9092",
                   "--input_topic", "t", "--bounded", "--security_protocol", "sasl_ssl",
                   "--ssl_cafile", __file__, "--ssl_check_hostname", "false",
                   "--sasl_mechanism", "PLAIN", "--sasl_plain_username", "alice",
                   "--sasl_password_env", secret_env])
    assert args.kafka_security == KafkaSecurity.of(
        "SASL_SSL", ssl_cafile=__file__, ssl_check_hostname=False, sasl_mechanism="PLAIN",
        sasl_plain_username="alice", sasl_password_env=secret_env)


def test_a_wrong_security_option_ends_the_job_at_start_naming_it(capsys):
    with pytest.raises(SystemExit) as exited:
        _parse(["--source", "kafka", "--bootstrap_servers", "127.0.0.1:9092",
                "--input_topic", "t", "--security_protocol", "SSL",
                "--ssl_cafile", "/no/such/ca.pem"])
    assert exited.value.code == 2
    assert "ssl_cafile=/no/such/ca.pem: cannot read it" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _parse(["--security_protocol", "SSL"])  # no --source kafka
    assert "--security_protocol: Kafka options need --source kafka" in capsys.readouterr().err
