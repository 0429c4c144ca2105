"""The launcher measures an epoch as the updates of the first DataLoader pass that made any."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, TensorDataset, dataloader

from remedy.training.epoch_length import EpochLength


def loader(samples: int, batch_size: int = 8, workers: int = 0) -> DataLoader:
    return DataLoader(TensorDataset(torch.zeros(samples, 2)), batch_size, num_workers=workers)


def test_an_epoch_is_the_updates_of_the_first_training_pass() -> None:
    """13 batches, an update every second (gradient accumulation): 6 updates an epoch. A
    validation pass inside the epoch and after it makes none and is passed over."""
    updates, found = [0], []
    original = dataloader._BaseDataLoaderIter.__next__
    measure = EpochLength(lambda: updates[0], found.append).install()
    try:
        train, val = loader(100), loader(30)
        for _ in val:  # before training: a pass without updates
            pass
        for _epoch in range(2):
            for i, _batch in enumerate(train):
                if i % 2 == 1:
                    updates[0] += 1
                if i == 3:
                    for _ in val:
                        pass
        assert found == [6] and measure.measured == 6  # once, for the first epoch
        assert dataloader._BaseDataLoaderIter.__next__ is original  # put back once measured
    finally:
        measure.close()
    assert dataloader._BaseDataLoaderIter.__next__ is original


def test_a_pass_cut_short_or_without_a_dataloader_measures_nothing() -> None:
    updates, found = [0], []
    measure = EpochLength(lambda: updates[0], found.append).install()
    try:
        for i, _batch in enumerate(loader(100)):  # a script's own step limit: break
            updates[0] += 1
            if i == 5:
                break
        for _batch in torch.zeros(4, 2):  # manual batching: no DataLoader at all
            updates[0] += 1
        assert found == [] and measure.measured is None
        for _batch in loader(16, workers=1):  # a worker process's loader ends a pass too
            updates[0] += 1
        assert found == [2]
    finally:
        measure.close()
