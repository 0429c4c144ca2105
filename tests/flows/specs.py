"""Tiny real training specs for flow tests (seconds, not minutes, on 2 cores)."""

from remedy.state_schema import RunSpec


def tiny_spec(**fields: object) -> RunSpec:
    """ELU ResNet-20 at width 4 on 256 synthetic images: explodes without batch norm."""
    base: dict[str, object] = {
        "base_job_name": "tiny",
        "width": 4,
        "batch_size": 32,
        "train_samples": 256,
        "test_samples": 64,
        "num_epochs": 8,
        "debugger_save_interval": 2,
    }
    return RunSpec(**{**base, **fields})
