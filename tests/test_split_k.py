"""transformerop/model/split_k.py: a^T b over a long K cut into slices, against float64; bf16
operands on a GPU take fp32 partials (the GPU test holds it to the single matmul's rounding)."""
import pytest
import torch

from transformerop.model.split_k import at_b, slices


def test_slices_divide_k_and_keep_a_minimum_length():
    assert slices(16384) == 64 and slices(256 * 64 * 3) == 64
    assert slices(1000) == 2 and slices(511) == 1 and slices(300) == 1 and slices(768) == 2
    for K in (16384, 1000, 768, 4096 + 512):
        s = slices(K)
        assert K % s == 0 and (s == 1 or K // s >= 256)


@pytest.mark.parametrize("K,N,C", [(16384, 65, 384), (1000, 7, 16), (300, 5, 8)])
def test_matches_float64(K, N, C):
    torch.manual_seed(0)
    a64, b64 = torch.randn(K, N, dtype=torch.float64), torch.randn(K, C, dtype=torch.float64)
    ref = a64.t() @ b64
    out = at_b(a64.float(), b64.float())
    assert out.dtype == torch.float32 and out.shape == (N, C)
    # fp32 sums of K products of unit normals: error ~ sqrt(K) * 2^-24 * |terms|; a slice dropped
    # or added twice would be off by ~sqrt(K / slices)
    assert (out.double() - ref).abs().max() < 1e-4 * K ** 0.5


def test_the_one_hot_gradient_counts_each_token():
    """The embedding's gradient shape: one-hot rows summed over 16,384 tokens equal a bincount."""
    idx = torch.randint(0, 65, (16384,))
    one_hot = torch.zeros(16384, 65).scatter_(1, idx[:, None], 1.0)
    assert torch.equal(at_b(one_hot, torch.ones(16384, 3))[:, 0], torch.bincount(idx, minlength=65).float())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_bf16_rounds_as_the_single_matmul():
    torch.manual_seed(0)
    a, b = torch.randn(16384, 65, device="cuda").bfloat16(), torch.randn(16384, 384, device="cuda").bfloat16()
    ref = a.double().t() @ b.double()
    out = at_b(a, b)
    single = a.t() @ b
    assert out.dtype == torch.bfloat16
    err, err_single = (out.double() - ref).abs().max().item(), (single.double() - ref).abs().max().item()
    assert err <= 1.5 * err_single + 1e-3, (err, err_single)  # fp32 partials: one rounding to bf16
