"""attention.forward=gluon (kernels/gluon_attention.py): on CPU, the kernel compiles for sm_90
with the overlap it is written for (ptxas keeps its MMAs asynchronous), the TMA views of the
layouts it takes, and the one-line refusals; on the GPU, parity against float64 and the tl
forward's dropout mask."""
import math
import re
import subprocess
from pathlib import Path

import pytest
import torch
from conftest import H200_SHARED_MEMORY, make_cfg

ga = pytest.importorskip("kernels.gluon_attention")


def _compile(D, dropout, config=None):
    """The Gluon forward compiled for sm_90 (no GPU needed), for the model's qkv layout."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    from triton.runtime.jit import mangle_type
    bn, stages = config or ga.CONFIGS[D]
    qkv = torch.empty(4 * 256, 3 * 6 * D, dtype=torch.bfloat16)
    desc = {n: TensorDescriptor(qkv, [4 * 256, 6 * D], [3 * 6 * D, 1], [blk, D],
                                gl.NVMMASharedLayout.get_default_for([blk, D], gl.bfloat16))
            for n, blk in (("q_desc", 64), ("k_desc", bn), ("v_desc", bn))}
    kernel = ga._fwd_kernel
    const = dict(HEAD_DIM=D, BLOCK_N=bn, STAGES=stages, DROPOUT=dropout)
    sig = {n: mangle_type(desc[n]) if n in desc else "constexpr" if n in const else "i32" for n in kernel.arg_names}
    sig.update(O="*bf16", LSE="*fp32", SEED="*i64", keep_scale="fp32", qk_scale="fp32")
    aligned = {(kernel.arg_names.index(n),): [["tt.divisibility", 16]] for n in ("O", "LSE", "SEED")}
    return triton.compile(GluonASTSource(fn=kernel, signature=sig, constexprs=const, attrs=aligned),
                          target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))


def _ptxas_info(ptx: str, tmp_path) -> str:
    """ptxas -v on the PTX, with the ptxas Triton itself assembles sm_90 with."""
    from triton.backends.nvidia.compiler import get_ptxas
    ptxas = get_ptxas(90).path
    src = tmp_path / "k.ptx"
    src.write_text(ptx)
    return subprocess.run([str(ptxas), "-arch=sm_90a", "-v", str(src), "-o", str(tmp_path / "k.cubin")],
                          capture_output=True, text=True, check=True).stderr


@pytest.mark.parametrize("D,dropout", [(64, False), (128, False), (128, True)])
def test_compiles_for_sm90_with_asynchronous_mmas(D, dropout, tmp_path):
    k = _compile(D, dropout)
    ptx = k.asm["ptx"]
    assert k.metadata.shared <= H200_SHARED_MEMORY
    assert "cp.async.bulk.tensor.2d" in ptx and "wgmma.mma_async" in ptx  # TMA copies, warp-group MMAs
    # the loop waits with one MMA still in flight (S_j done, P V running) ...
    assert "wgmma.wait_group.sync.aligned 1;" in ptx
    info = _ptxas_info(ptx, tmp_path)
    # ... and ptxas keeps them asynchronous: C7514 is its note that it serialised them
    assert "C7514" not in info, info
    spills = [int(n) for n in re.findall(r"(\d+) bytes spill stores", info)]
    assert spills and max(spills) == 0, info


def test_ptxas_note_is_caught(tmp_path, monkeypatch):
    """The planted fault: issue the P V before S_j, so that waiting down to one in flight no longer
    covers S_j and the softmax reads a running MMA's registers: the note must appear."""
    src = Path(ga.__file__).read_text()
    issue_s = ("        s = warpgroup_mma(q_smem, k_smem.index(j % STAGES).permute((1, 0)), s_zero, use_acc=False, "
               "is_async=True)\n")
    issue_pv = ("        acc = warpgroup_mma(gl.convert_layout(p.to(dtype), p_layout), v_smem.index((j - 1) % STAGES), "
                "acc,\n                            is_async=True)\n")
    assert issue_s + issue_pv in src
    path = tmp_path / "gluon_attention_swapped.py"
    path.write_text(src.replace(issue_s + issue_pv, issue_pv + issue_s))
    import importlib.util
    spec = importlib.util.spec_from_file_location("kernels.gluon_attention_swapped", path)
    swapped = importlib.util.module_from_spec(spec)
    swapped.__package__ = "kernels"  # its relative imports
    spec.loader.exec_module(swapped)
    monkeypatch.setattr(ga, "_fwd_kernel", swapped._fwd_kernel)
    assert "C7514" in _ptxas_info(_compile(128, False).asm["ptx"], tmp_path)


def test_tma_views_of_the_layouts():
    B, T, H, D = 2, 40, 3, 64
    qkv = torch.empty(B, T, 3, H, D, dtype=torch.bfloat16)
    q = qkv[:, :, 0].transpose(1, 2)  # the model's: (B, H, T, D) views of (B, T, 3, H, D)
    assert ga._rows(q, T, D) == (T, 0, D, 3 * H * D, B * T, H * D)
    bhtd = torch.empty(B, H, T, D, dtype=torch.bfloat16)
    assert ga._rows(bhtd, T, D) == (H * T, T, 0, D, B * H * T, D)
    assert ga._rows(bhtd.transpose(2, 3), T, D) is None  # no unit stride along D
    assert ga._rows(torch.empty(B, H, T, 2 * D, dtype=torch.bfloat16)[..., :D], T, D) == (H * T, T, 0, 2 * D,
                                                                                          B * H * T, D)
    assert ga._rows(torch.empty(B, T, H, D + 4, dtype=torch.bfloat16)[..., :D].transpose(1, 2), T, D) is None


def test_refusals_are_one_line(monkeypatch):
    from transformerop.model import BackendUnavailable, get_backend
    q = torch.empty(1, 2, 8, 64, dtype=torch.bfloat16)
    assert "Hopper" in ga.unsupported(q, q, q, True)
    # where the tl kernels run (here: the interpreter), the Gluon forward says what it needs instead
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    cfg = make_cfg("attention=triton", "attention.forward=gluon", "train.dtype=float32")
    with pytest.raises(BackendUnavailable, match=r"^attention.forward=gluon needs a Hopper GPU .*attention.forward=tl"):
        get_backend("triton").check(cfg, torch.device("cpu"))
    with pytest.raises(Exception, match="forward"):
        make_cfg("attention=triton", "attention.forward=cudnn")


def _qkv(B, T, H, D, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(B, T, 3, H, D, device="cuda", generator=g).to(torch.bfloat16)
    return tuple(x[:, :, i].transpose(1, 2) for i in range(3))


def _ref64(q, k, v):
    q, k, v = q.double(), k.double(), v.double()
    T = q.shape[2]
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    s = s.masked_fill(torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v, torch.logsumexp(s, -1) / math.log(2)


@pytest.mark.gpu
@pytest.mark.parametrize("T,D", [(256, 64), (300, 64), (77, 128), (1024, 128)])
def test_gpu_matches_float64(T, D):
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("sm_90 only")
    from kernels import triton_attention as ta
    q, k, v = _qkv(2, T, 6, D)
    ta.poison_outputs = True
    try:
        o, lse = ta._forward(q, k, v, True, 1 / math.sqrt(D), True, kernel="gluon")
    finally:
        ta.poison_outputs = False
    ro, rl = _ref64(q, k, v)
    assert (o.double() - ro).abs().max().item() / ro.abs().max().item() < 8e-3
    assert (lse.view(2, 6, T).double() - rl).abs().max().item() < 1e-4


@pytest.mark.gpu
def test_gpu_dropout_mask_and_gradients_match_tl():
    """Same seed, same mask as the tl forward (its backward regenerates it), so the gradients
    through either forward agree."""
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("sm_90 only")
    from kernels import triton_attention as ta
    q, k, v = (t.detach().requires_grad_() for t in _qkv(2, 320, 6, 128, seed=1))
    g = torch.randn(2, 6, 320, 128, device="cuda").to(torch.bfloat16)
    out = {}
    for kernel in ("tl", "gluon"):
        o = ta.attention(q, k, v, dropout_p=0.2, seed=7, forward=kernel)
        out[kernel] = (o.detach(), *torch.autograd.grad(o, (q, k, v), g))
    for a, b in zip(out["tl"], out["gluon"]):
        assert (a.float() - b.float()).abs().max().item() <= 1e-2 * b.float().abs().max().item()
    assert ((out["gluon"][0] == 0) == (out["tl"][0] == 0)).float().mean().item() > 0.999
