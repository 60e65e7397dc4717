"""The fault-injecting S3 proxy of ``tests/s3_fault_proxy.py`` itself: it forwards what it
should (signature intact), and injects exactly the faults it is told to, as S3 would."""

from __future__ import annotations

import http.client
import json
import socket
import time
import urllib.request
import uuid
from typing import Iterator

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, ConnectionClosedError

from cluster_fixtures import s3_bucket, s3_server  # noqa: F401 (fixtures)
from s3_fault_proxy import S3FaultProxy


def s3_client(endpoint: str, key: str = "test", secret: str = "test"):
    """A client that tries each call once: every fault the proxy injects reaches the test."""
    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=key,
                        aws_secret_access_key=secret, region_name="us-east-1",
                        config=Config(retries={"total_max_attempts": 1}))


@pytest.fixture
def proxy(s3_server) -> Iterator[S3FaultProxy]:
    with S3FaultProxy(s3_server) as running:
        yield running


def test_puts_through_the_proxy_land_in_the_bucket_without_waiting_on_expect(proxy, s3_bucket):
    client = s3_client(proxy.endpoint)
    started = time.monotonic()
    for index in range(3):
        client.put_object(Bucket=s3_bucket.name, Key=f"k{index}", Body=b"v" * 100_000)
    # botocore sends "Expect: 100-continue", then waits 1 s for an answer before each body
    assert time.monotonic() - started < 2.5
    assert s3_bucket.client.get_object(Bucket=s3_bucket.name, Key="k2")["Body"].read() \
        == b"v" * 100_000
    assert client.head_object(Bucket=s3_bucket.name, Key="k1")["ContentLength"] == 100_000
    assert s3_bucket.keys("k") == ["k0", "k1", "k2"]
    assert proxy.requests == {"PUT": 3, "HEAD": 1}
    assert proxy.injected == {"503": 0, "500": 0, "reset": 0}


def test_the_upstream_verifies_the_signature_the_client_made_for_the_proxy(proxy, s3_bucket,
                                                                          s3_server):
    iam = boto3.client("iam", endpoint_url=s3_server, aws_access_key_id="test",
                       aws_secret_access_key="test", region_name="us-east-1")
    user = f"proxy-{uuid.uuid4().hex[:8]}"
    iam.create_user(UserName=user)
    iam.put_user_policy(UserName=user, PolicyName="s3", PolicyDocument=(
        '{"Version": "2012-10-17", "Statement": '
        '[{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}'))
    key = iam.create_access_key(UserName=user)["AccessKey"]

    def moto_auth(count: str) -> str:  # moto checks SigV4 after `count` more requests
        request = urllib.request.Request(f"{s3_server}/moto-api/reset-auth", count.encode(),
                                         {"Content-Type": "text/plain"})
        with urllib.request.urlopen(request) as response:
            return json.load(response)["PREVIOUS_INITIAL_NO_AUTH_ACTION_COUNT"]

    previous = moto_auth("0")
    try:
        s3_client(proxy.endpoint, key["AccessKeyId"], key["SecretAccessKey"]).put_object(
            Bucket=s3_bucket.name, Key="signed", Body=b"signed")
        with pytest.raises(ClientError) as refused:
            s3_client(proxy.endpoint, key["AccessKeyId"], "not-the-secret").put_object(
                Bucket=s3_bucket.name, Key="forged", Body=b"forged")
    finally:
        moto_auth(previous)
    assert refused.value.response["Error"]["Code"] == "SignatureDoesNotMatch"
    assert s3_bucket.keys("") == ["signed"]


def test_every_second_put_is_answered_503_slow_down_and_never_reaches_the_server(proxy,
                                                                                  s3_bucket):
    proxy.set_faults(every_nth_put_503=2)
    client = s3_client(proxy.endpoint)
    client.put_object(Bucket=s3_bucket.name, Key="first", Body=b"1")
    with pytest.raises(ClientError) as slow_down:
        client.put_object(Bucket=s3_bucket.name, Key="second", Body=b"2")
    client.put_object(Bucket=s3_bucket.name, Key="third", Body=b"3")  # same connection, fine
    assert slow_down.value.response["Error"]["Code"] == "SlowDown"
    assert slow_down.value.response["Error"]["Message"] == "Please reduce your request rate."
    assert slow_down.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
    assert proxy.injected["503"] == 1
    assert s3_bucket.keys("") == ["first", "third"]


def test_a_reset_put_fails_with_a_closed_connection_and_the_next_put_succeeds(proxy, s3_bucket):
    proxy.set_faults(reset_puts=1)
    client = s3_client(proxy.endpoint)
    with pytest.raises(ConnectionClosedError):
        client.put_object(Bucket=s3_bucket.name, Key="reset", Body=b"r" * 10_000)
    client.put_object(Bucket=s3_bucket.name, Key="after", Body=b"a")
    assert proxy.injected == {"503": 0, "500": 0, "reset": 1}
    assert s3_bucket.keys("") == ["after"]


def test_a_reset_is_a_tcp_reset_after_part_of_the_body_not_a_close(proxy, s3_bucket):
    proxy.set_faults(reset_puts=1)
    with socket.create_connection(("127.0.0.1", int(proxy.endpoint.rsplit(":", 1)[1])),
                                  timeout=10) as raw:
        raw.sendall(f"PUT /{s3_bucket.name}/raw HTTP/1.1\r\nHost: s3\r\n"
                    "Content-Length: 10\r\n\r\n01234".encode())  # half the body, no more
        with pytest.raises(ConnectionResetError):  # a FIN would read b"" instead
            raw.recv(1024)


def test_an_internal_error_answers_a_get_500_once(proxy, s3_bucket):
    s3_bucket.client.put_object(Bucket=s3_bucket.name, Key="object", Body=b"o")
    proxy.set_faults(internal_errors=1)
    client = s3_client(proxy.endpoint)
    with pytest.raises(ClientError) as internal:
        client.get_object(Bucket=s3_bucket.name, Key="object")
    assert internal.value.response["Error"]["Code"] == "InternalError"
    assert internal.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
    assert client.get_object(Bucket=s3_bucket.name, Key="object")["Body"].read() == b"o"
    assert proxy.injected["500"] == 1 and proxy.requests == {"GET": 2}


def test_a_permanent_error_answers_every_request_until_cleared(proxy, s3_bucket):
    proxy.fail_all_with(403, "AccessDenied")
    client = s3_client(proxy.endpoint)
    for _ in range(2):
        with pytest.raises(ClientError) as denied:
            client.list_objects_v2(Bucket=s3_bucket.name)
        assert denied.value.response["Error"]["Code"] == "AccessDenied"
        assert denied.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    proxy.clear()
    assert client.list_objects_v2(Bucket=s3_bucket.name)["KeyCount"] == 0
    assert proxy.injected["403"] == 2


def test_a_chunked_request_body_is_forwarded_whole(proxy, s3_bucket):
    host, port = proxy.endpoint.rsplit("/", 1)[1].split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    connection.request("PUT", f"/{s3_bucket.name}/chunked", body=iter([b"ab", b"cde", b"f"]),
                       encode_chunked=True)  # moto checks no signature unless told to
    assert connection.getresponse().status == 200
    connection.close()
    assert s3_bucket.client.get_object(Bucket=s3_bucket.name, Key="chunked")["Body"].read() \
        == b"abcdef"


def test_stop_cuts_idle_keep_alive_connections_and_closes_the_port(s3_server, s3_bucket):
    proxy = S3FaultProxy(s3_server).start()
    client = s3_client(proxy.endpoint)
    client.list_objects_v2(Bucket=s3_bucket.name)  # leaves a connection open, idle
    started = time.monotonic()
    proxy.stop()
    assert time.monotonic() - started < 5  # not the handler's 30 s read timeout
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", int(proxy.endpoint.rsplit(":", 1)[1])), 1)
