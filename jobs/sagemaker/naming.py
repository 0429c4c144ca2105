"""Training job names as the service takes them: 1-63 characters of [a-zA-Z0-9-], starting
and ending with a letter or digit (botocore's model: `[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}`).

A run's job name (base_job_name + launch time) may hold other characters and be longer, and
job names are unique per account and region, not per run: two runs launched in the same
second under the same base_job_name would collide, and a relaunch after a crash must find
its own job again. So the service's name is the run's name made valid and shortened, plus
8 hex digits of a hash of the run's folder and job name: deterministic (launch stays
idempotent), distinct between runs.
"""

from __future__ import annotations

import hashlib
import re

MAX_LENGTH = 63
NAME_PATTERN = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}")
_NOT_ALLOWED = re.compile(r"[^a-zA-Z0-9-]+")
_SUFFIX_LENGTH = 8


def is_valid(name: str) -> bool:
    return len(name) <= MAX_LENGTH and NAME_PATTERN.fullmatch(name) is not None


def training_job_name(job_name: str, run_key: str) -> str:
    """The service's name of the run's job `job_name`; run_key: what tells runs apart (the
    run folder's absolute path)."""
    digest = hashlib.sha256(f"{run_key}\0{job_name}".encode()).hexdigest()[:_SUFFIX_LENGTH]
    stem = _NOT_ALLOWED.sub("-", job_name).strip("-")
    stem = re.sub(r"-{2,}", "-", stem)[: MAX_LENGTH - _SUFFIX_LENGTH - 1].rstrip("-")
    name = f"{stem}-{digest}" if stem else f"remedy-{digest}"
    assert is_valid(name), name
    return name
