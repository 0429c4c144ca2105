"""Sequence classification with the Hugging Face Trainer, in the style of its run_glue.py
examples: dataclass arguments parsed by HfArgumentParser (`--learning_rate`, `--max_steps`,
`--output_dir`, `--use_cpu`, ...), a BERT-style model built from a config (nothing
downloaded), a synthetic task whose label is carried by three marker tokens among noise
tokens. It prints its evaluation as one JSON line.

    python run_classifier.py --output_dir out --max_steps 300 --learning_rate 5e-4 \
        --per_device_train_batch_size 32 --report_to none --save_strategy no --use_cpu
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import torch
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    HfArgumentParser,
    Trainer,
    TrainingArguments,
    set_seed,
)


@dataclass
class DataArguments:
    num_train: int = field(default=2048)
    num_eval: int = field(default=512)
    seq_len: int = field(default=24)
    vocab: int = field(default=200)


@dataclass
class ModelArguments:
    hidden: int = field(default=48)
    layers: int = field(default=2)
    heads: int = field(default=4)


class Synthetic(torch.utils.data.Dataset):
    def __init__(self, n: int, seq_len: int, vocab: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.ids = rng.integers(10, vocab, size=(n, seq_len))
        self.labels = rng.integers(0, 2, size=n)
        for i, label in enumerate(self.labels):  # 3 marker tokens per sample: 2-4 or 5-7
            spots = rng.choice(seq_len, 3, replace=False)
            self.ids[i, spots] = rng.integers(2, 5, 3) + 3 * label
        self.ids[:, 0] = 1  # [CLS]

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": torch.tensor(self.ids[i]), "labels": torch.tensor(self.labels[i])}


def accuracy(pred) -> dict[str, float]:
    return {"accuracy": float((pred.predictions.argmax(-1) == pred.label_ids).mean())}


def main() -> None:
    parser = HfArgumentParser((ModelArguments, DataArguments, TrainingArguments))
    model_args, data_args, training_args = parser.parse_args_into_dataclasses()
    set_seed(training_args.seed)
    config = BertConfig(
        vocab_size=data_args.vocab,
        hidden_size=model_args.hidden,
        num_hidden_layers=model_args.layers,
        num_attention_heads=model_args.heads,
        intermediate_size=4 * model_args.hidden,
        max_position_embeddings=64,
        num_labels=2,
    )
    model = BertForSequenceClassification(config)
    train = Synthetic(data_args.num_train, data_args.seq_len, data_args.vocab, 0)
    evaluation = Synthetic(data_args.num_eval, data_args.seq_len, data_args.vocab, 1)
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train,
        eval_dataset=evaluation,
        compute_metrics=accuracy,
    )
    trainer.train()
    metrics = trainer.evaluate()
    evaluated = {"eval_accuracy": metrics["eval_accuracy"], "eval_loss": metrics["eval_loss"]}
    print(json.dumps(evaluated))


if __name__ == "__main__":
    main()
