"""The job's code as the cloud SDK ships it: source_dir packed into sourcedir.tar.gz (its
contents at the archive's root, where the toolkit unpacks them into /opt/ml/code) and
uploaded to the bucket; its S3 URI is the sagemaker_submit_directory hyperparameter.

remedy adds two files: its entry program (container_entry.py, as ENTRY_PROGRAM: the
sagemaker_program), and the tensor debugger's configuration (.remedy/debugger.json, what
to save and the s3:// store to save it in). Without source_dir a script is packed alone,
and a module (the built-in job) not at all: it comes from the image. The archive is
deterministic (sorted, no times or owners), so a relaunch uploads the same bytes.
"""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from remedy.jobs.sagemaker.layout import DEBUGGER_CONFIG, PACKED_DIR
from remedy.state_schema import RunSpec

ENTRY_PROGRAM = "remedy_sagemaker_entry.py"
SKIPPED = frozenset({"__pycache__", ".git", ".venv", ".mypy_cache", ".pytest_cache"})
MAX_ARCHIVE_BYTES = 512 * 1024 * 1024  # a bigger source_dir holds data: read it from S3


class SourceError(ValueError):
    pass


def source_files(spec: RunSpec) -> Iterator[tuple[str, Path]]:
    """(name in the archive, file) for the user's code."""
    if spec.source_dir is not None:
        root = Path(spec.source_dir).resolve()
        if not root.is_dir():
            raise SourceError(f"run_spec.source_dir: no folder {root}")
        for path in sorted(root.rglob("*")):
            relative = path.relative_to(root)
            if SKIPPED.intersection(relative.parts) or not path.is_file():
                continue
            yield relative.as_posix(), path
    elif spec.is_script:
        script = Path(spec.entry_point).resolve()
        if not script.is_file():
            raise SourceError(f"run_spec.entry_point: no script {spec.entry_point!r}")
        yield script.name, script


def _add(archive: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, 0
    archive.addfile(info, io.BytesIO(data))


def pack(spec: RunSpec, debugger_config: dict[str, Any]) -> bytes:
    """sourcedir.tar.gz: the user's code, remedy's entry program and debugger config."""
    buffer = io.BytesIO()
    # mtime=0 in the gzip header too: the same code packs to the same bytes
    with (
        gzip.GzipFile(fileobj=buffer, mode="wb", compresslevel=6, mtime=0) as compressed,
        tarfile.open(fileobj=compressed, mode="w", format=tarfile.PAX_FORMAT) as archive,
    ):
        total = 0
        for name, path in source_files(spec):
            if name == ENTRY_PROGRAM or name.split("/")[0] == PACKED_DIR:
                raise SourceError(
                    f"run_spec.source_dir: {name} is a name remedy's own files take; rename it"
                )
            data = path.read_bytes()
            total += len(data)
            if total > MAX_ARCHIVE_BYTES:
                raise SourceError(
                    f"run_spec.source_dir: more than {MAX_ARCHIVE_BYTES >> 20} MiB of files; "
                    "keep data out of it (read it from the bucket)"
                )
            _add(archive, name, data, 0o755 if path.stat().st_mode & 0o111 else 0o644)
        entry = Path(__file__).with_name("container_entry.py").read_bytes()
        _add(archive, ENTRY_PROGRAM, entry)
        _add(archive, DEBUGGER_CONFIG, json.dumps(debugger_config, indent=2).encode())
    return buffer.getvalue()


def upload(s3: Any, bucket: str, key: str, archive: bytes) -> None:
    """One PUT: a reader (the service) sees the whole archive or none."""
    s3.put_object(Bucket=bucket, Key=key, Body=archive, ContentType="application/gzip")
