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
    finally:
        measure.close()


def test_a_worker_process_loader_is_measured_by_the_same_hook() -> None:
    """Loaders with num_workers > 0 iterate in this process through the same __next__ (the
    hook's one patch covers both). Checked without starting a worker: a worker needs shared
    memory that a CI machine may not give (one exited 1 there)."""
    for iterator in (
        dataloader._SingleProcessDataLoaderIter,
        dataloader._MultiProcessingDataLoaderIter,
    ):
        assert "__next__" not in vars(iterator)
        assert iterator.__next__ is dataloader._BaseDataLoaderIter.__next__
