import pytest

from remedy.training.schedule import learning_rate_for_epoch


@pytest.mark.parametrize(
    ("epoch", "expected"),
    [(0, 0.003), (1, 0.1), (80, 0.1), (81, 0.01), (121, 0.01), (122, 0.001), (500, 0.001)],
)
def test_seed_schedule(epoch: int, expected: float) -> None:
    assert learning_rate_for_epoch(epoch, 0.003, 0.1) == pytest.approx(expected)


def test_negative_epoch_is_an_error() -> None:
    with pytest.raises(ValueError):
        learning_rate_for_epoch(-1, 0.1, 0.1)
