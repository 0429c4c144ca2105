"""The small files a cloud job's entry program sends to <prefix>/remedy/ (container_entry):
progress.json and the NaN guard's rule_status/*.json while the job runs, result.json when
it has ended. They are mirrored into the job's local folder (LocalPaths.job_reports), where
the backend reads them as the local backend reads a job's own files.

Only these names are taken from the bucket (a key elsewhere, or a rule status whose name is
not a plain file name, is left there).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from remedy.debugger.s3 import parse_uri
from remedy.jobs.sagemaker.layout import CloudPaths
from remedy.state_schema import write_atomic
from remedy.state_schema.job_env import PROGRESS_FILE, RESULT_FILE, RULE_STATUS_DIR

MIRRORED = frozenset({PROGRESS_FILE, RESULT_FILE})
RULE_STATUS = re.compile(rf"{RULE_STATUS_DIR}/[A-Za-z0-9_.-]+\.json")


def wanted(relative: str) -> bool:
    if relative in MIRRORED:
        return True
    return RULE_STATUS.fullmatch(relative) is not None and ".." not in relative


def mirror(s3: Any, cloud: CloudPaths, folder: Path, seen: dict[str, str] | None = None) -> None:
    """Copy the job's report files that changed (by ETag, remembered in `seen`) to folder."""
    seen = {} if seen is None else seen
    where = parse_uri(cloud.reports)
    prefix = where.key("")
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=where.bucket, Prefix=prefix)
    for page in pages:
        for item in page.get("Contents", []):
            relative = item["Key"][len(prefix) :].lstrip("/")
            if not wanted(relative) or seen.get(item["Key"]) == item.get("ETag"):
                continue
            body = s3.get_object(Bucket=where.bucket, Key=item["Key"])["Body"].read()
            write_atomic(folder / relative, body.decode("utf-8", errors="replace"))
            seen[item["Key"]] = item.get("ETag", "")
