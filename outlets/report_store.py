"""Reports in an object store, for runs whose machine no one can browse (pool workers).

With REMEDY_REPORTS_S3=s3://bucket/prefix, a run's report folder is uploaded at its end to
<prefix>/<run name>/report/ and its artifacts and final notification link index.html by a
presigned HTTPS URL (the report is one self-contained page: its plots are inline). The
link is the only thing that names the bucket; it carries a signature and the access key
id of the credentials that signed it (never the secret key), and it expires after
LINK_EXPIRES_S. Credentials, region and endpoint come from boto3's usual chain (AWS_*
variables, profile, instance role), as for the cloud backend.
"""

from __future__ import annotations

import mimetypes
import os
from pathlib import Path

REPORTS_S3_ENV = "REMEDY_REPORTS_S3"
# A week: the longest a SigV4 presigned URL may live (temporary credentials end sooner).
LINK_EXPIRES_S = 7 * 24 * 3600


def reports_store() -> tuple[str, str] | None:
    """(bucket, prefix) from REMEDY_REPORTS_S3, None when it is not set; a value that is not
    s3://bucket[/prefix] is refused, naming the variable."""
    value = os.environ.get(REPORTS_S3_ENV, "").strip()
    if not value:
        return None
    bucket, _, prefix = value.removeprefix("s3://").partition("/")
    if not value.startswith("s3://") or not bucket:
        raise ValueError(f"{REPORTS_S3_ENV}: expected s3://bucket[/prefix], got {value!r}")
    return bucket, prefix.strip("/")


def upload_report(report_dir: str | Path, run: str, store: tuple[str, str]) -> str:
    """Upload every file of `report_dir` under <prefix>/<run>/report/ in the store (each a
    single PUT, with its content type so that a browser shows it); the presigned URL of
    its index.html."""
    import boto3
    from botocore.config import Config

    bucket, prefix = store
    folder = Path(report_dir)
    base = "/".join(part for part in (prefix, run, "report") if part)
    # SigV4: the signature every region takes (boto3 may presign the older SigV2 otherwise)
    s3 = boto3.client("s3", config=Config(signature_version="s3v4"))
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        key = f"{base}/{path.relative_to(folder).as_posix()}"
        s3.put_object(Bucket=bucket, Key=key, Body=path.read_bytes(), ContentType=kind)
    return s3.generate_presigned_url(
        "get_object",
        Params={"Bucket": bucket, "Key": f"{base}/index.html"},
        ExpiresIn=LINK_EXPIRES_S,
    )
