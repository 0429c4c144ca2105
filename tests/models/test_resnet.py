import pytest
import torch
from torch import nn

from remedy.models import ResNet, ResNetConfig, build_model, make_activation


def small(**overrides: object) -> ResNet:
    return build_model(ResNetConfig(**({"depth": 8, "width": 4} | overrides)))


def test_output_shape_for_a_batch_of_cifar_images() -> None:
    model = small(num_classes=7)
    assert model(torch.zeros(3, 3, 32, 32)).shape == (3, 7)


def test_resnet20_layout_and_module_names() -> None:
    model = build_model(ResNetConfig(width=8))
    names = dict(model.named_modules())
    assert len(model.stacks) == 3
    assert [len(stack) for stack in model.stacks] == [3, 3, 3]
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d) and m.kernel_size == (3, 3)]
    assert len(convs) == 19  # stem + 9 blocks x 2: with the head, the 20 layers of ResNet-20
    assert isinstance(names["stem"], nn.Conv2d)
    assert isinstance(names["stacks.0.0.conv1"], nn.Conv2d)
    assert isinstance(names["stacks.2.2.conv2"], nn.Conv2d)
    assert isinstance(names["head"], nn.Linear)
    assert names["stacks.0.0.conv1"].out_channels == 8
    assert names["stacks.1.0.conv1"].out_channels == 16
    assert names["stacks.2.0.conv1"].out_channels == 32
    assert names["head"].in_features == 32


def test_only_first_block_of_later_stacks_downsamples_with_a_1x1_shortcut() -> None:
    model = build_model(ResNetConfig(width=8))
    shortcuts = {
        name: module
        for name, module in model.named_modules()
        if name.endswith("shortcut") and module is not None
    }
    assert sorted(shortcuts) == ["stacks.1.0.shortcut", "stacks.2.0.shortcut"]
    for conv in shortcuts.values():
        assert conv.kernel_size == (1, 1) and conv.stride == (2, 2)
    assert model.stacks[1][0].conv1.stride == (2, 2)
    assert model.stacks[1][1].conv1.stride == (1, 1)


def test_batch_norm_only_when_asked() -> None:
    plain = build_model(ResNetConfig(width=4))
    assert not any(isinstance(m, nn.BatchNorm2d) for m in plain.modules())
    normed = build_model(ResNetConfig(width=4, batch_norm=True))
    bns = [name for name, m in normed.named_modules() if isinstance(m, nn.BatchNorm2d)]
    assert len(bns) == 9
    assert "stacks.0.0.bn" in bns


def test_batch_norm_sits_before_the_residual_addition() -> None:
    # With BN weight and bias zero the residual branch adds nothing: the block is identity.
    model = small(batch_norm=True)
    block = model.stacks[0][0]
    nn.init.zeros_(block.bn.weight)
    nn.init.zeros_(block.bn.bias)
    block.eval()
    x = torch.randn(2, 4, 32, 32)
    assert torch.allclose(block(x), x)


@pytest.mark.parametrize("depth", [7, 10, 21, 2, 0])
def test_depth_must_be_6n_plus_2(depth: int) -> None:
    with pytest.raises(ValueError, match="6n\\+2"):
        build_model(ResNetConfig(depth=depth))


def test_deeper_nets_have_more_blocks() -> None:
    assert [len(stack) for stack in build_model(ResNetConfig(depth=32, width=2)).stacks] == [5] * 3


@pytest.mark.parametrize(
    ("name", "kind"),
    [("elu", nn.ELU), ("relu", nn.ReLU), ("leaky_relu", nn.LeakyReLU), ("selu", nn.SELU),
     ("tanh", nn.Tanh)],
)  # fmt: skip
def test_activation_factory(name: str, kind: type[nn.Module]) -> None:
    assert isinstance(make_activation(name), kind)
    model = small(activation=name)
    assert isinstance(model.stacks[0][0].act1, kind) and isinstance(model.final_act, kind)


def test_unknown_activation_is_named() -> None:
    with pytest.raises(ValueError, match="swish"):
        small(activation="swish")


def test_he_normal_init_and_zero_biases() -> None:
    torch.manual_seed(0)
    model = build_model(ResNetConfig(width=16))
    conv = model.stacks[2][1].conv1  # 64 -> 64 filters, fan_in 576
    fan_in = conv.in_channels * 9
    assert conv.weight.std().item() == pytest.approx((2 / fan_in) ** 0.5, rel=0.05)
    assert model.head.weight.std().item() == pytest.approx((2 / 64) ** 0.5, rel=0.1)
    biases = [m.bias for m in model.modules() if isinstance(m, nn.Conv2d | nn.Linear)]
    assert all(torch.count_nonzero(b) == 0 for b in biases)
