"""S3 plumbing shared by the writer (uploads) and the reader: URIs, client, keys.

boto3 is imported only when an s3:// store is used. The client honours the usual AWS
environment (credentials, AWS_REGION, AWS_ENDPOINT_URL for S3-compatible servers).
A PUT is atomic in S3: readers see a whole object or none, so no temp-name dance is needed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

SCHEME = "s3://"


@dataclass(frozen=True)
class S3Location:
    bucket: str
    prefix: str  # no leading or trailing slash; may be ""

    def key(self, relative: str) -> str:
        return f"{self.prefix}/{relative}" if self.prefix else relative

    @property
    def uri(self) -> str:
        return f"{SCHEME}{self.bucket}/{self.prefix}"


def is_s3(location: str | os.PathLike[str]) -> bool:
    return os.fspath(location).startswith(SCHEME)


def parse_uri(uri: str) -> S3Location:
    if not uri.startswith(SCHEME):
        raise ValueError(f"not an s3:// URI: {uri!r}")
    bucket, _, prefix = uri[len(SCHEME) :].partition("/")
    if not bucket:
        raise ValueError(f"s3 URI without a bucket: {uri!r}")
    return S3Location(bucket, prefix.strip("/"))


def client() -> Any:
    import boto3

    return boto3.client("s3")


def is_missing(error: Exception) -> bool:
    """True for the errors S3 gives for an object or range that is not there."""
    code = getattr(error, "response", {}).get("Error", {}).get("Code", "")
    return code in ("NoSuchKey", "404", "NotFound", "InvalidRange")


class S3Uploader:
    """Uploads the files of a local staging folder to the same relative keys under a URI."""

    def __init__(self, uri: str) -> None:
        self.location = parse_uri(uri)
        self._client = client()

    def exists(self, relative: str) -> bool:
        try:
            self._client.head_object(Bucket=self.location.bucket, Key=self.location.key(relative))
        except Exception as error:
            if is_missing(error):
                return False
            raise
        return True

    def upload(self, path: str | os.PathLike[str], relative: str) -> None:
        with open(path, "rb") as handle:
            self._client.put_object(
                Bucket=self.location.bucket, Key=self.location.key(relative), Body=handle.read()
            )
