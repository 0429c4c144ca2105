"""The seed's learning-rate schedule: a warmup epoch, then steps down at epochs 81 and 122."""


def learning_rate_for_epoch(
    epoch: int, warmup_learning_rate: float, learning_rate: float, warmup_epochs: int = 1
) -> float:
    if epoch < 0:
        raise ValueError(f"epoch must be >= 0, got {epoch}")
    if epoch < warmup_epochs:  # the seed warms up for exactly one epoch
        return warmup_learning_rate
    if epoch < 81:
        return learning_rate
    if epoch < 122:
        return learning_rate / 10
    return learning_rate / 100
