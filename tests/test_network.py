"""UNet3D: block shapes, input-size rules, settings, checkpointing and AMP equivalence; device helpers."""

from __future__ import annotations

import json

import pytest
import torch

from segpipe.config import NetworkConfig
from segpipe.device import CPU_BF16_ENV, amp_dtype, autocast, make_grad_scaler, precision_name, resolve_device, use_amp
from segpipe.errors import ConfigError, GeometryError
from segpipe.memory import estimate_network
from segpipe.model.network import (
    BottleneckBlock,
    ConvNormAct,
    DecoderBottleneck,
    DecoderPlain,
    PlainBlock,
    UNet3D,
    build_network,
    load_network_config,
)

SMALL = dict(base_width=8, depth=2)  # widths 8-16-32; inputs multiples of 4


def _randomise(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Non-trivial affine norm parameters, so the comparisons exercise every parameter."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=gen))
            elif name.endswith("norm.bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
    return model


def _loss_and_grads(model: torch.nn.Module, x: torch.Tensor, amp: bool = False) -> tuple[torch.Tensor, dict]:
    model.zero_grad(set_to_none=True)
    x = x.clone().requires_grad_(True)
    with autocast("cpu", enabled=amp):
        out = model(x)
    weights = torch.linspace(-1, 1, out.numel()).reshape(out.shape)
    (out.float() * weights).sum().backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    grads["input"] = x.grad.detach().clone()
    return out.detach().float(), grads


# ----------------------------------------------------------------------------- blocks
def test_block_shapes() -> None:
    x = torch.randn(2, 16, 8, 6, 4)
    assert BottleneckBlock(16, 16)(x).shape == (2, 16, 8, 6, 4)
    block = BottleneckBlock(16, 32, ratio=4)
    assert block(x).shape == (2, 32, 8, 6, 4)
    assert block.reduce.conv.weight.shape == (8, 16, 1, 1, 1)  # 1x1x1 reduce to 32 // 4
    assert block.conv.conv.weight.shape == (8, 8, 3, 3, 3)
    assert block.expand.weight.shape == (32, 8, 1, 1, 1)
    first = BottleneckBlock(1, 16, first_kernel=3)
    assert first.reduce.conv.weight.shape == (4, 1, 3, 3, 3)
    assert first(torch.randn(1, 1, 4, 4, 4)).shape == (1, 16, 4, 4, 4)
    assert PlainBlock(16, 8)(x).shape == (2, 8, 8, 6, 4)
    assert ConvNormAct(16, 4, 1, norm="group")(x).shape == (2, 4, 8, 6, 4)
    low, skip = torch.randn(2, 32, 4, 3, 2), torch.randn(2, 16, 8, 6, 4)
    assert DecoderBottleneck(32, 16)(low, skip).shape == (2, 16, 8, 6, 4)
    assert DecoderPlain(32, 16)(low, skip).shape == (2, 16, 8, 6, 4)
    with pytest.raises(ValueError, match="odd kernel"):
        ConvNormAct(4, 4, 2)


def test_activations_are_in_place() -> None:
    net = UNet3D(**SMALL)
    acts = [m for m in net.modules() if isinstance(m, torch.nn.LeakyReLU)]
    assert acts and all(m.inplace for m in acts)


def test_default_network_shape() -> None:
    net = UNet3D()
    assert net.required_divisor == 8
    assert net.widths == (16, 32, 64, 128)
    assert net.stage_names == ("enc0", "enc1", "enc2", "enc3", "dec2", "dec1", "dec0")
    per_stage = net.parameters_per_stage()
    assert sum(per_stage.values()) == sum(p.numel() for p in net.parameters())
    assert list(per_stage)[-1] == "head"


@pytest.mark.parametrize("shape_zyx", [(16, 24, 32), (8, 8, 12), (32, 16, 16)])
def test_any_multiple_of_the_divisor(shape_zyx: tuple[int, int, int]) -> None:
    net = UNet3D(**SMALL, num_classes=4).eval()
    with torch.no_grad():
        out = net(torch.randn(1, 1, *shape_zyx))
    assert out.shape == (1, 4, *shape_zyx)


def test_input_size_errors() -> None:
    net = UNet3D(**SMALL)
    with pytest.raises(GeometryError, match="multiples of 4"):
        net(torch.randn(1, 1, 16, 18, 16))
    with pytest.raises(GeometryError, match="channel"):
        net(torch.randn(1, 2, 16, 16, 16))
    with pytest.raises(GeometryError, match="5 dimensions"):
        net(torch.randn(1, 16, 16, 16))
    with pytest.raises(GeometryError, match="more than one voxel"):
        net(torch.randn(1, 1, 4, 4, 4))  # bottom would be 1x1x1 under instance norm


def test_settings_round_trip(tmp_path) -> None:
    net = UNet3D(**SMALL, norm="group", checkpointing=["enc0", "dec0"])
    settings = net.settings()
    assert json.loads(json.dumps(settings)) == settings
    assert settings["checkpointing"] == ["enc0", "dec0"]
    again = UNet3D.from_config(settings)
    assert again.checkpointed_stages == ("enc0", "dec0")
    assert [p.shape for p in again.parameters()] == [p.shape for p in net.parameters()]
    assert build_network(NetworkConfig(depth=2)).required_divisor == 4
    path = tmp_path / "net.yaml"
    path.write_text("network:\n  base_width: 8\n  depth: 2\ntrain:\n  epochs: 3\n")
    assert load_network_config(path) == NetworkConfig(base_width=8, depth=2)


def test_invalid_settings() -> None:
    with pytest.raises(ConfigError, match="network.norm"):
        UNet3D(norm="batch")
    with pytest.raises(ConfigError, match="unknown config key"):
        UNet3D(widths=3)
    with pytest.raises(ConfigError, match="enc0"):
        UNet3D(checkpointing=["enc0", "bogus"])
    with pytest.raises(ConfigError, match="got 'middle'"):
        UNet3D().set_checkpointing("middle")


# ----------------------------------------------------------------------------- equivalence
@pytest.mark.parametrize("mode", ["encoder", "all", ["enc1", "dec0"]])
def test_checkpointing_matches_plain_path(mode) -> None:
    torch.manual_seed(0)
    net = _randomise(UNet3D(**SMALL))
    x = torch.randn(2, 1, 16, 12, 8)
    out_ref, grads_ref = _loss_and_grads(net, x)
    net.set_checkpointing(mode)
    out, grads = _loss_and_grads(net, x)
    torch.testing.assert_close(out, out_ref, rtol=1e-5, atol=1e-6)
    for name, grad in grads_ref.items():
        torch.testing.assert_close(grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_amp_matches_fp32_within_bf16_tolerance() -> None:
    """bf16 keeps 8 bits of mantissa, gradients included: compare directions, not digits."""
    torch.manual_seed(0)
    net = _randomise(UNet3D(**SMALL))
    x = torch.randn(2, 1, 16, 16, 8)
    target = torch.randint(0, 3, (2, 16, 16, 8), generator=torch.Generator().manual_seed(1))

    def run(amp: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        net.zero_grad(set_to_none=True)
        xx = x.clone().requires_grad_(True)
        with autocast("cpu", enabled=amp):
            out = net(xx)
        torch.nn.functional.cross_entropy(out.float(), target).backward()
        grads = torch.cat([p.grad.flatten().float() for p in net.parameters()])
        return out.detach().float(), grads, xx.grad.detach()

    def cos(a: torch.Tensor, b: torch.Tensor) -> float:
        return torch.nn.functional.cosine_similarity(a.flatten(), b.flatten(), dim=0).item()

    out32, grads32, input32 = run(False)
    out16, grads16, input16 = run(True)
    assert cos(out16, out32) > 0.999
    assert (out16 - out32).abs().max() < 0.05 * out32.abs().max()
    assert cos(grads16, grads32) > 0.98
    assert cos(input16, input32) > 0.9
    # checkpointing under AMP is the same computation as AMP without it
    net.set_checkpointing("all")
    out16c, grads16c, input16c = run(True)
    torch.testing.assert_close(out16c, out16, rtol=1e-2, atol=1e-2)
    assert cos(grads16c, grads16) > 0.999 and cos(input16c, input16) > 0.999


def test_group_norm_stays_16_bit_under_autocast() -> None:
    net = UNet3D(**SMALL, norm="group")
    outputs = []
    norm = net.encoders[1].blocks[0].reduce.norm
    norm.register_forward_hook(lambda m, a, o: outputs.append(o.dtype))
    with autocast("cpu"):
        net(torch.randn(1, 1, 8, 8, 8))
    assert outputs == [torch.bfloat16]


def test_input_gradient_is_exact_in_float64() -> None:
    """In-place activations and adds must not corrupt what backward needs: gradcheck the input."""
    torch.manual_seed(0)
    net = _randomise(UNet3D(base_width=4, depth=1, num_classes=2, checkpointing="all")).double()
    x = torch.randn(1, 1, 4, 4, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(net, (x,), eps=1e-6, atol=1e-5)


def test_design_targets_hold_on_saved_bytes() -> None:
    """Checkpointing >= 3x fewer saved bytes, AMP >= 1.8x, bottleneck <= half of plain convolution."""
    patch = (48, 48, 48)
    base = estimate_network(NetworkConfig(), patch, 2).activation_bytes
    assert base / estimate_network(NetworkConfig(), patch, 2, checkpointing="all").activation_bytes >= 3
    assert base / estimate_network(NetworkConfig(), patch, 2, amp=True).activation_bytes >= 1.8
    plain = estimate_network(NetworkConfig(block="plain"), patch, 2).activation_bytes
    assert base <= 0.5 * plain


# ----------------------------------------------------------------------------- device helpers
def test_device_helpers() -> None:
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(ConfigError, match="expected 'auto', 'cpu'"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="CUDA"):
            resolve_device("cuda")
    assert amp_dtype("cpu") == torch.bfloat16 and amp_dtype("cuda") == torch.float16
    with autocast("cpu"):
        assert torch.nn.functional.linear(torch.ones(1, 2), torch.ones(3, 2)).dtype == torch.bfloat16
    with autocast("cpu", enabled=False):
        assert torch.nn.functional.linear(torch.ones(1, 2), torch.ones(3, 2)).dtype == torch.float32
    scaler = make_grad_scaler("cpu", enabled=True)
    assert not scaler.is_enabled()
    loss = torch.tensor(2.0, requires_grad=True)
    assert scaler.scale(loss) is loss


def test_amp_runs_on_the_cpu_only_where_bf16_is_native(monkeypatch: pytest.MonkeyPatch) -> None:
    """bf16 autocast is ~25x slower than fp32 on an AVX2-only CPU: use_amp turns it off there."""
    import segpipe.device as device_mod

    monkeypatch.delenv(CPU_BF16_ENV, raising=False)
    for native in (True, False):
        monkeypatch.setattr(device_mod, "_native_cpu_bf16", lambda native=native: native)
        assert use_amp("cpu", True) is native
        assert use_amp("cpu", False) is False
        assert use_amp("cuda", True) is True  # fp16 on CUDA always pays
        assert precision_name("cpu", use_amp("cpu", True)) == ("bf16" if native else "fp32")
    # the environment overrides the check both ways
    monkeypatch.setenv(CPU_BF16_ENV, "1")
    assert use_amp("cpu", True) is True
    monkeypatch.setenv(CPU_BF16_ENV, "0")
    monkeypatch.setattr(device_mod, "_native_cpu_bf16", lambda: True)
    assert use_amp("cpu", True) is False
    monkeypatch.setenv(CPU_BF16_ENV, "yes")
    with pytest.raises(ConfigError, match="SEGPIPE_CPU_BF16: expected 0 or 1"):
        use_amp("cpu", True)
    assert precision_name("cuda", True) == "fp16" and precision_name("cuda", False) == "fp32"


def test_shipped_default_config_matches_the_defaults() -> None:
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "configs" / "network_default.yaml"
    assert load_network_config(path) == NetworkConfig()
