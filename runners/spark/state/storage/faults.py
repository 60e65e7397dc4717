"""Storage that misbehaves: which errors of ``--checkpoint_dir`` are worth retrying, the
retries, and a full disk.

Months of running meet an object store that throttles (S3's ``503 SlowDown``), fails a
request (``500 InternalError``), resets a connection or times out, and disks that fill. On
``local[N]`` Spark retries no failed task, so one such error would fail the whole job. Every
operation of :class:`~runners.spark.state.storage.filesystems.DurableStorage` (on the driver and in
the tasks on the executors) therefore goes through :func:`retried`:

- :func:`classify` sorts what the filesystem raised: *transient* (throttling, server
  errors, resets, timeouts) is retried with exponential backoff and full jitter until the
  budget (``--storage_retry_seconds``, default :data:`DEFAULT_RETRY_SECONDS`) is spent;
  *refused* (access denied, a missing bucket, bad credentials) fails at once as
  :class:`StorageError`, with a message that names the setting to fix; anything else
  (*permanent*) is raised as it is, at once; *full* (no space left) fails at once
  as :class:`StorageFullError`, naming the path and the bytes needed.
- An operation that needed retries is logged once (WARNING) when it ends, not per attempt,
  and counted (:func:`take_retries`): a task reports its count with its partition, the
  driver adds its own, and the batch report shows the sum.
- After the budget the operation raises :class:`StorageUnavailableError`: the batch fails,
  and a restart resumes from the latest checkpoint (nothing of a failed batch is named by a
  checkpoint).

>>> classify(ConnectionResetError(104, "Connection reset by peer")).kind
'transient'
>>> classify(OSError(28, "No space left on device")).kind
'full'
>>> classify(PermissionError(13, "Permission denied")).kind
'permanent'
>>> policy = RetryPolicy(budget_seconds=1.0, first_delay=0.001)
>>> _ = take_retries()  # what this process counted before
>>> attempts = []
>>> def flaky():
...     attempts.append(1)
...     if len(attempts) < 3:
...         raise TimeoutError("timed out")
...     return "done"
>>> retried("write", "/tmp/x", flaky, policy), len(attempts), take_retries()
('done', 3, 2)
"""

from __future__ import annotations

import errno
import logging
import os
import random
import re
import threading
import time
from typing import Callable, Iterator, NamedTuple, Optional, TypeVar

_LOGGER = logging.getLogger(__name__)

#: Seconds one storage operation may spend retrying transient errors before it fails.
DEFAULT_RETRY_SECONDS = 180.0
_T = TypeVar("_T")

#: HTTP statuses of a request worth repeating (timeout, throttling, server errors).
_TRANSIENT_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
#: Error codes object stores answer for throttling and their own failures.
_TRANSIENT_CODES = frozenset({
    "SlowDown", "Throttling", "ThrottlingException", "TooManyRequests", "RequestTimeout",
    "RequestTimeoutException", "InternalError", "ServiceUnavailable", "RequestLimitExceeded",
    "OperationAborted",
    # a request body damaged on its way (every operation here may be repeated)
    "BadDigest", "XAmzContentSHA256Mismatch", "IncompleteBody"})
#: Exceptions of the HTTP stacks (botocore, urllib3, http.client, google-api-core) that mean
#: the connection failed, not the request.
_TRANSIENT_NAMES = frozenset({
    "ConnectionClosedError", "EndpointConnectionError", "ReadTimeoutError",
    "ConnectTimeoutError", "ProtocolError", "IncompleteRead", "IncompleteReadError",
    "ResponseStreamingError", "RemoteDisconnected", "ServiceUnavailable", "TooManyRequests",
    "InternalServerError", "BadGateway", "GatewayTimeout", "DeadlineExceeded",
    # botocore's bases of its connection errors (SSLError, ProxyConnectionError, ...)
    "HTTPClientError", "ConnectionError"})
#: Error codes that no retry fixes, and what to check.
_CREDENTIALS = ("check the credentials the job runs with (--s3_access_key_id and "
                "--s3_secret_access_key, or the AWS credentials of the environment; for "
                "gs://, the service account)")
_PERMANENT_CODES = {
    "NoSuchBucket": "the bucket in --checkpoint_dir does not exist: create it or name another",
    "AccessDenied": f"access to --checkpoint_dir is denied: {_CREDENTIALS} and the bucket's "
                    "permissions",
    "AllAccessDisabled": "access to the bucket in --checkpoint_dir is disabled",
    "InvalidAccessKeyId": f"the access key is not known to the object store: {_CREDENTIALS}",
    "SignatureDoesNotMatch": f"the secret key does not match the access key: {_CREDENTIALS}",
    "ExpiredToken": f"the session token has expired: {_CREDENTIALS}",
    "InvalidToken": f"the session token is not valid: {_CREDENTIALS}",
}
_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
_CODE_IN_MESSAGE = re.compile(r"An error occurred \((\w+)\)")


class StorageError(ValueError):
    """``--checkpoint_dir`` names storage this process cannot use (the message says why)."""


class StorageFullError(OSError):
    """No space left where a state file, a checkpoint or a store was being written."""


class StorageUnavailableError(RuntimeError):
    """Storage kept failing with transient errors for the whole retry budget."""


class StorageFault(NamedTuple):
    """What an error of the storage means: ``kind`` is ``"transient"``, ``"full"``,
    ``"refused"`` (the store refused the job's settings: a missing bucket, bad credentials)
    or ``"permanent"`` (anything else); ``reason`` names the error, and for a refusal what
    to fix."""

    kind: str
    reason: str


def _causes(error: BaseException) -> Iterator[BaseException]:
    """The error and every error behind it: its cause and context (a client that wraps
    what it caught) and the per-path errors of Beam's ``BeamIOError``."""
    seen, pending = set(), [error]
    while pending:
        current = pending.pop(0)
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        pending.extend([current.__cause__, current.__context__])
        details = getattr(current, "exception_details", None)
        if isinstance(details, dict):
            pending.extend(value for value in details.values()
                           if isinstance(value, BaseException))


def _codes(error: BaseException) -> Iterator[object]:
    """The error codes and HTTP statuses an error carries (botocore's ``response``, Beam's
    ``S3ClientError.code``, google-api-core's ``code``, and a code quoted in the message)."""
    response = getattr(error, "response", None)
    if isinstance(response, dict):
        yield response.get("Error", {}).get("Code")
        yield response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    yield getattr(error, "code", None)
    match = _CODE_IN_MESSAGE.search(str(error))
    if match:
        yield match.group(1)


def classify(error: BaseException) -> StorageFault:
    """Whether ``error``, raised by a storage operation, is transient, a full disk, or
    permanent (see the module docstring)."""
    transient = None
    for cause in _causes(error):
        if isinstance(cause, OSError) and cause.errno in _FULL_ERRNOS:
            return StorageFault("full", os.strerror(cause.errno))
        for code in _codes(cause):
            if isinstance(code, str) and code in _PERMANENT_CODES:
                return StorageFault("refused", f"{code}: {_PERMANENT_CODES[code]}")
            if code in (401, 403):
                return StorageFault("refused", f"HTTP {code}: {_CREDENTIALS}")
            if transient is None and (code in _TRANSIENT_CODES or code in _TRANSIENT_STATUSES):
                transient = f"{code}"
        if transient is None and (
                isinstance(cause, (ConnectionError, TimeoutError))
                or any(base.__name__ in _TRANSIENT_NAMES for base in type(cause).__mro__)):
            transient = type(cause).__name__
    if transient is not None:
        return StorageFault("transient", transient)
    return StorageFault("permanent", f"{type(error).__name__}: {error}")


class RetryPolicy(NamedTuple):
    """Bounded exponential backoff with full jitter: the n-th wait is uniform in
    ``[0, min(max_delay, first_delay * 2**n)]``, and no attempt starts after
    ``budget_seconds`` since the first."""

    budget_seconds: float = DEFAULT_RETRY_SECONDS
    first_delay: float = 0.1
    max_delay: float = 10.0


class _Counter:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._retries = 0

    def add(self, count: int) -> None:
        with self._lock:
            self._retries += count

    def take(self) -> int:
        with self._lock:
            count, self._retries = self._retries, 0
            return count


_RETRIES = _Counter()


def take_retries() -> int:
    """Retries this process made since the last call (a task reports them with its
    partition; the driver adds them to the batch report)."""
    return _RETRIES.take()


def retried(operation: str, path: str, call: Callable[[], _T],
            policy: RetryPolicy = RetryPolicy(), needed: Optional[int] = None) -> _T:
    """``call()``, repeated while it raises transient errors, within ``policy``'s budget.
    ``needed``: the bytes the operation writes (named when the disk is full).

    A permanent error is raised as it is, or as :class:`StorageError` (naming the setting)
    when the store answered one of the codes no retry fixes; a full disk as
    :class:`StorageFullError`; a budget spent as :class:`StorageUnavailableError`."""
    started = time.monotonic()
    failures = 0
    while True:
        try:
            result = call()
        except StorageFullError:
            raise
        except Exception as error:  # sorted by classify; anything unknown is re-raised
            fault = classify(error)
            if fault.kind != "transient":
                _RETRIES.add(failures)  # the attempts before it were retried all the same
            if fault.kind == "full":
                raise full_disk(f"{operation} {path}", path, needed) from error
            if fault.kind == "refused":
                raise StorageError(f"{operation} {path}: {fault.reason}") from error
            if fault.kind == "permanent":
                raise
            failures += 1
            elapsed = time.monotonic() - started
            delay = random.uniform(0, min(policy.max_delay, policy.first_delay * 2 ** failures))
            if elapsed + delay > policy.budget_seconds:
                _RETRIES.add(failures - 1)
                raise StorageUnavailableError(
                    f"{operation} {path} failed {failures} times in {elapsed:.1f} s with "
                    f"transient errors (last: {fault.reason}: {error}); the retry budget "
                    f"(--storage_retry_seconds={policy.budget_seconds:g}) is spent. The batch "
                    "fails; restart the job once the storage answers: it resumes from its "
                    "latest checkpoint") from error
            time.sleep(delay)
            continue
        if failures:
            _RETRIES.add(failures)
            _LOGGER.warning("%s %s succeeded after %d transient error(s) in %.1f s",
                            operation, path, failures, time.monotonic() - started)
        return result


def full_disk(what: str, path: str, needed: Optional[int]) -> StorageFullError:
    """The error for ``what`` (an operation and its path) finding no space at ``path``."""
    free = free_bytes(path)
    sizes = ", ".join(part for part in (
        None if needed is None else f"{needed:,} bytes needed",
        None if free is None else f"{free:,} bytes free") if part)
    return StorageFullError(errno.ENOSPC, f"{what}: no space left on the device"
                            f"{f' ({sizes})' if sizes else ''}. Nothing written in part is "
                            "used; free space there and restart the job: it resumes from "
                            "its latest checkpoint")


def free_bytes(path: str) -> Optional[int]:
    """Bytes free for this process on the filesystem of ``path`` (or of its nearest
    existing parent); None where the platform cannot tell."""
    while path and not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    try:
        stat = os.statvfs(path)
    except (OSError, AttributeError):
        return None
    return stat.f_bavail * stat.f_frsize
