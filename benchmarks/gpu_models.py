"""Models that fill a GPU at realistic batch sizes, for the debugger's --device cuda
benchmarks; torch alone (no torchvision or transformers needed).

- gpt2_small(): a GPT-2-small-sized decoder (12 layers, width 768, 12 heads, vocabulary
  50,257, context 1,024; about 124 M parameters with the tied embedding), batch 8.
- resnet50(): a ResNet-50-sized CNN (bottleneck blocks 3-4-6-3, 25.6 M parameters) on
  224x224 images, batch 64.
Each builder returns (model, loss_fn, make_batch): loss_fn(model, batch) -> scalar loss.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

Job = tuple[nn.Module, Callable[[nn.Module, Any], torch.Tensor], Callable[[], Any]]


class _Decoder(nn.Module):
    def __init__(self, vocab: int, width: int, layers: int, heads: int, context: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.position = nn.Embedding(context, width)
        layer = nn.TransformerEncoderLayer(
            width, heads, 4 * width, dropout=0.0, activation="gelu", batch_first=True,
            norm_first=True,
        )  # fmt: skip
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.embed.weight  # tied, as GPT-2's

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        length = tokens.shape[1]
        positions = torch.arange(length, device=tokens.device)
        mask = nn.Transformer.generate_square_subsequent_mask(length, device=tokens.device)
        hidden = self.blocks(self.embed(tokens) + self.position(positions), mask=mask,
                             is_causal=True)  # fmt: skip
        return self.head(self.norm(hidden))


def gpt2_small(device: str, batch: int = 8, context: int = 1024) -> Job:
    vocab = 50_257
    model = _Decoder(vocab, 768, 12, 12, context).to(device)
    tokens = torch.randint(0, vocab, (batch, context + 1), device=device)

    def loss_fn(model: nn.Module, batch_tokens: torch.Tensor) -> torch.Tensor:
        logits = model(batch_tokens[:, :-1])
        return nn.functional.cross_entropy(logits.flatten(0, 1), batch_tokens[:, 1:].flatten())

    return model, loss_fn, lambda: tokens


class _Bottleneck(nn.Module):
    def __init__(self, inputs: int, width: int, stride: int) -> None:
        super().__init__()
        out = 4 * width
        self.body = nn.Sequential(
            nn.Conv2d(inputs, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
            nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.Conv2d(width, out, 1, bias=False), nn.BatchNorm2d(out),
        )  # fmt: skip
        self.skip = (
            nn.Sequential(nn.Conv2d(inputs, out, 1, stride, bias=False), nn.BatchNorm2d(out))
            if stride != 1 or inputs != out
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.skip(x))


def resnet50(device: str, batch: int = 64) -> Job:
    layers: list[nn.Module] = [
        nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
        nn.MaxPool2d(3, 2, 1),
    ]  # fmt: skip
    inputs = 64
    for stage, (blocks, width) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512), strict=True)):
        for block in range(blocks):
            stride = 2 if block == 0 and stage > 0 else 1
            layers.append(_Bottleneck(inputs, width, stride))
            inputs = 4 * width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(inputs, 1000)]
    model = nn.Sequential(*layers).to(device).to(memory_format=torch.channels_last)
    images = torch.randn(batch, 3, 224, 224, device=device).to(memory_format=torch.channels_last)
    labels = torch.randint(0, 1000, (batch,), device=device)

    def loss_fn(model: nn.Module, data: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return nn.functional.cross_entropy(model(data[0]), data[1])

    return model, loss_fn, lambda: (images, labels)


MODELS: dict[str, Callable[[str], Job]] = {"gpt2-small": gpt2_small, "resnet50": resnet50}
