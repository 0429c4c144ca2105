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
