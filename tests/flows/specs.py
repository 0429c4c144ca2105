"""Tiny real training specs for flow tests (seconds, not minutes, on 2 cores)."""

from remedy.state_schema import RunSpec

# What these tests need of a run that completes: it ran to the end with a finite training
# loss. Their tiny models do not learn the synthetic task in 8-64 steps (test accuracy stays
# near chance, 0.03-0.16), so under the default verdict (the model trained: its loss below
# the untrained model's, its accuracy clearly above chance) such a run is rightly not clean;
# these tests are about the flow, and say so. tests/flows/test_clean_means_trained.py
# drops it to judge the default verdict on real training.
RAN_TO_THE_END = [{"metric": "train:loss", "op": "<", "value": 100.0}]


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
        "success_criteria": RAN_TO_THE_END,
    }
    return RunSpec(**{**base, **fields})
