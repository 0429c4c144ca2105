import json
from pathlib import Path

import pytest

from remedy.errors import UsageError
from remedy.prefect_commands import search_parameters


def test_search_config_is_validated_before_serving(tmp_path: Path) -> None:
    path = tmp_path / "search.json"
    path.write_text(json.dumps({"space": {"activation": ["swish"]}}))
    with pytest.raises(UsageError, match="activation"):
        search_parameters(str(path))
    path.write_text(json.dumps({"spaces": {}}))
    with pytest.raises(UsageError, match="unknown key"):
        search_parameters(str(path))
    good = {"space": {"add_batch_norm": [0, 1]}, "settings": {"concurrency": 2}}
    path.write_text(json.dumps(good))
    assert search_parameters(str(path)) == good


def test_remedy_server_keeps_its_state_in_sqlite_by_default(
    prefect_api_url: str, prefect_home: Path
) -> None:
    # The session's server is `remedy server` with no --database-url (tests/conftest.py):
    # what it records lands in PREFECT_HOME/prefect.db.
    import sqlite3

    from prefect import flow

    @flow(name="sqlite-default-probe")
    def probe() -> int:
        return 1

    probe()
    database = prefect_home / "prefect.db"
    assert database.exists(), f"no SQLite database in {prefect_home}"
    with sqlite3.connect(database) as connection:
        names = connection.execute(
            "SELECT flow.name FROM flow_run JOIN flow ON flow.id = flow_run.flow_id"
        ).fetchall()
    assert ("sqlite-default-probe",) in names
