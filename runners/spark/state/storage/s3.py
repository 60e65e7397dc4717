"""``s3://`` checkpoint locations, through one boto3 client per process and set of options.

Beam's S3 filesystem writes every object as a multipart upload (three requests, the first
logged at ERROR level on every failure) and makes a new client per operation; botocore then
retries throttling and resets by itself, invisibly. A streaming run writes a state file per
key partition at every batch, and its retries must be bounded, logged once and counted
(:mod:`~runners.spark.state.storage.faults`). So the runner reaches S3 itself: one
request per object (up to 1 GB; a multipart upload above), with botocore's own retries
off, the ``--s3_*`` options read as Beam's S3 filesystem reads them. The pipeline's own S3
reads and writes keep Beam's filesystem.

>>> S3Objects.split("s3://bucket/a/b.bin")
('bucket', 'a/b.bin')
>>> S3Objects.matches("s3://b/checkpoint-*/MANIFEST.json", "s3://b/checkpoint-01/MANIFEST.json")
True
>>> S3Objects.matches("s3://b/checkpoint-*/MANIFEST.json", "s3://b/checkpoint-01/x/MANIFEST.json")
False
"""

from __future__ import annotations

import os
import re
import shutil
import threading
from typing import Any, Dict, Iterable, List, Tuple

#: Bytes read at a time when an object is copied to a local file.
_COPY_BYTES = 8 << 20
#: Largest file uploaded in one PUT, and the parts of a larger one.
_SINGLE_PUT_BYTES = 1 << 30
_PART_BYTES = 256 << 20
#: Objects per DeleteObjects request (S3's limit).
_DELETE_BATCH = 1000
_CLIENTS: Dict[Tuple[Tuple[str, Any], ...], Any] = {}
_CLIENTS_LOCK = threading.Lock()


def _client(options: Tuple[Tuple[str, Any], ...]) -> Any:
    """The process's boto3 client for these filesystem options (boto3 clients are
    thread-safe; creating one costs ~100 ms of botocore loading its service model)."""
    with _CLIENTS_LOCK:
        if options not in _CLIENTS:
            import boto3
            from botocore.config import Config

            given = dict(options)
            _CLIENTS[options] = boto3.session.Session().client(
                "s3", region_name=given.get("s3_region_name"),
                api_version=given.get("s3_api_version"),
                use_ssl=not given.get("s3_disable_ssl", False),
                verify=given.get("s3_verify"), endpoint_url=given.get("s3_endpoint_url"),
                aws_access_key_id=given.get("s3_access_key_id"),
                aws_secret_access_key=given.get("s3_secret_access_key"),
                aws_session_token=given.get("s3_session_token"),
                # One attempt per call: the runner's retries are the ones that count.
                config=Config(retries={"total_max_attempts": 1}, connect_timeout=10,
                              read_timeout=60))
        return _CLIENTS[options]


class S3Objects:
    """Whole-object operations on ``s3://bucket/key`` paths (each one request, or a
    paginated listing)."""

    def __init__(self, options: Tuple[Tuple[str, Any], ...]) -> None:
        self._client = _client(options)

    @staticmethod
    def split(path: str) -> Tuple[str, str]:
        bucket, _, key = path[len("s3://"):].partition("/")
        return bucket, key

    @staticmethod
    def matches(pattern: str, path: str) -> bool:
        """``path`` matches the glob ``pattern`` (``*`` within one path segment)."""
        expression = "".join("[^/]*" if part == "*" else re.escape(part)
                             for part in re.split(r"(\*)", pattern))
        return re.fullmatch(expression, path) is not None

    def write(self, path: str, data: bytes) -> None:
        bucket, key = self.split(path)
        self._client.put_object(Bucket=bucket, Key=key, Body=data)

    def read(self, path: str) -> bytes:
        bucket, key = self.split(path)
        return self._client.get_object(Bucket=bucket, Key=key)["Body"].read()

    def exists(self, path: str) -> bool:
        bucket, key = self.split(path)
        try:
            self._client.head_object(Bucket=bucket, Key=key)
        except Exception as error:  # botocore's ClientError; a missing object is a 404
            status = getattr(error, "response", {}).get("ResponseMetadata", {}).get(
                "HTTPStatusCode")
            if status == 404:  # a HEAD has no body to tell a missing bucket from a key
                return False
            raise
        return True

    def list(self, prefix: str) -> List[str]:
        bucket, key = self.split(prefix)
        pages = self._client.get_paginator("list_objects_v2").paginate(Bucket=bucket,
                                                                        Prefix=key)
        return sorted(f"s3://{bucket}/{entry['Key']}" for page in pages
                      for entry in page.get("Contents", ()))

    def match(self, pattern: str) -> List[str]:
        prefix = pattern.split("*", 1)[0]
        return [path for path in self.list(prefix) if self.matches(pattern, path)]

    def delete(self, paths: Iterable[str]) -> None:
        by_bucket: Dict[str, List[str]] = {}
        for path in paths:
            bucket, key = self.split(path)
            by_bucket.setdefault(bucket, []).append(key)
        for bucket, keys in by_bucket.items():
            for start in range(0, len(keys), _DELETE_BATCH):
                batch = keys[start:start + _DELETE_BATCH]
                answer = self._client.delete_objects(
                    Bucket=bucket, Delete={"Objects": [{"Key": key} for key in batch],
                                           "Quiet": True})
                errors = answer.get("Errors") or []
                if errors:
                    first = errors[0]
                    raise OSError(f"deleting {len(errors)} objects of s3://{bucket} failed: "
                                  f"An error occurred ({first.get('Code')}) on "
                                  f"{first.get('Key')}: {first.get('Message')}")

    def upload(self, local_path: str, path: str) -> None:
        """One PUT; a file over :data:`_SINGLE_PUT_BYTES` as a multipart upload (S3 takes
        at most 5 GB in one PUT), aborted if it fails."""
        bucket, key = self.split(path)
        if os.path.getsize(local_path) <= _SINGLE_PUT_BYTES:
            with open(local_path, "rb") as source:
                self._client.put_object(Bucket=bucket, Key=key, Body=source)
            return
        from boto3.s3.transfer import TransferConfig

        self._client.upload_file(local_path, bucket, key, Config=TransferConfig(
            multipart_threshold=_SINGLE_PUT_BYTES, multipart_chunksize=_PART_BYTES,
            use_threads=False))

    def download(self, path: str, local_path: str) -> None:
        bucket, key = self.split(path)
        body = self._client.get_object(Bucket=bucket, Key=key)["Body"]
        with open(local_path, "wb") as target:
            shutil.copyfileobj(body, target, _COPY_BYTES)
