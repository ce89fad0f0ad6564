"""decode=megakernel: its schedule and weight streams (CPU), its refusals, and on a GPU the kernel
itself against recompute.

CPU: a float64 emulator walks each CTA's stream exactly as the kernel's consumers do -- the CTA
records, tile list and block list the kernel reads, the weight rows unpacked from the packed
bytes alone (chunk-major or row-major), the attention in splits combined from partial softmaxes
-- and one decode step of it must match the float64 model's logits. So a block laid out at the
wrong offset, a tile missing or doubled, a wrong layout or split rule fails here, without a GPU.
GPU (-m gpu): the real kernel, fp32 and bf16, batch 1 to 8, resident and streamed weights,
greedy and sampled with top-k, past block_size, through decode/parity.py."""
import math

import pytest
import torch
from conftest import make_cfg
from omegaconf import OmegaConf

from transformerop.decode import Decoder, check
from transformerop.decode import megakernel_plan as mp
from transformerop.decode.megakernel import kernel_weights
from transformerop.model import BackendUnavailable, build_model


def gpt(n_layer=2, n_head=4, n_embd=64, block_size=32, bias=True, vocab=20, seed=0):
    torch.manual_seed(seed)
    cfg = OmegaConf.create({"model": {"name": "gpt", "n_layer": n_layer, "n_head": n_head, "n_embd": n_embd,
                                      "block_size": block_size, "dropout": 0.0, "bias": bias},
                            "attention": {"name": "sdpa"}})
    m = build_model(cfg, vocab).eval()
    with torch.no_grad():  # LayerNorm and bias parameters away from their 1 and 0
        for p in m.parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p) * 0.1)
    return m


def layer_norm(x, w, b, eps):
    x = (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + eps)
    return x * w + (b if b.numel() else 0)


def emulate_step(p: mp.Plan, packed, w, x, kc, vc, pos, eps, scale):
    """One decode step as the kernel's CTAs do it, in float64: x (B, C) the embedded input, kc/vc
    (L, B, H, W, D) caches holding slots < pos (slot pos is written here). Returns logits (B, V)."""
    C, H, D, L, B = p.C, p.H, p.C // p.H, p.L, p.B
    f64 = {k: v.double() for k, v in w.items()}
    cursor = [rec[0] for rec in p.cta]
    dtype = {4: torch.float32, 2: torch.bfloat16}[p.elem]

    def take(cta, chunked, K=C):  # the next block of this CTA's stream, as (rows, K) float64
        packet, offset, rows, row0 = p.blocks[cursor[cta]]
        cursor[cta] += 1
        at = p.cta[cta][2] * 16 + packet * p.cta[cta][16] + offset
        data = packed[at:at + rows * K * p.elem].view(dtype).double()
        block = data.view(K // 8, rows, 8).transpose(0, 1).reshape(rows, K) if chunked else data.view(rows, K)
        return rows, row0, block

    def blocks(cta, n, chunked=True, K=C):  # a tile's blocks until they cover its n rows
        done = 0
        while done < n:
            rows, row0, blk = take(cta, chunked, K)
            yield rows, row0, blk
            done += rows

    def tiles(cta, kind):
        first, count = p.cta[cta][kind], p.cta[cta][kind + 1]
        return p.tile_list[first:first + count]

    def vec(name, layer=None):
        t = f64[name]
        return t if layer is None or not t.numel() else t[layer]

    def bias(name, layer, at=slice(None)):  # zero for a model without biases
        return vec(name, layer)[at] if f64[name].numel() else 0

    for layer in range(L):
        h_in = layer_norm(x, vec("LN1_W", layer), vec("LN1_B", layer), eps)
        qkv = torch.full((B, 3 * C), math.nan, dtype=torch.float64)
        for cta in range(p.grid):
            for h, r, n, _ in tiles(cta, mp.QKV):
                for rows, row0, blk in blocks(cta, n):
                    at = h * 3 * D + r + row0 + torch.arange(rows)
                    qkv[:, at] = h_in @ blk.T + bias("B_QKV", layer, at)
        q, k, v = qkv.view(B, H, 3, D).unbind(2)
        kc[layer, :, :, pos], vc[layer, :, :, pos] = k, v
        part = {}
        x_mid = torch.full_like(x, math.nan)
        if p.fused:  # the items add their heads' shares of the projection: x_mid starts at x + b_o
            x_mid = x + bias("B_O", layer)
        for cta in range(p.grid):
            for b, h, s, _ in tiles(cta, mp.ATT):
                j0, j1 = s * p.split_len, min((s + 1) * p.split_len, pos + 1)
                if j0 >= j1:
                    part[b, h, s] = (torch.zeros(D, dtype=torch.float64), -math.inf, 0.0)
                    continue
                score = (kc[layer, b, h, j0:j1] @ q[b, h]) * scale * math.log2(math.e)
                m = score.max().item()
                e = torch.exp2(score - m)
                part[b, h, s] = (e @ vc[layer, b, h, j0:j1], m, e.sum().item())
                if p.fused:
                    y_h = part[b, h, s][0] / part[b, h, s][2]
                    for rows, row0, blk in blocks(cta, C, True, D):
                        x_mid[b, row0:row0 + rows] += blk @ y_h
        y = torch.zeros(B, C, dtype=torch.float64)
        for b in range(B):
            for h in range(H):
                shares = [part[b, h, s] for s in range(p.splits)]
                top = max(m for _, m, _ in shares)
                weight = [2 ** (m - top) for _, m, _ in shares]
                total = sum(wt * norm for wt, (_, _, norm) in zip(weight, shares))
                y[b, h * D:(h + 1) * D] = sum(wt * o for wt, (o, _, _) in zip(weight, shares)) / total
        for cta in range(p.grid):
            for r, n, *_ in tiles(cta, mp.PROJ):
                for rows, row0, blk in blocks(cta, n):
                    at = r + row0 + torch.arange(rows)
                    x_mid[:, at] = x[:, at] + bias("B_O", layer, at) + y @ blk.T
        h_mid = layer_norm(x_mid, vec("LN2_W", layer), vec("LN2_B", layer), eps)
        x = x_mid + bias("B_P2", layer)
        for cta in range(p.grid):
            for j, n, *_ in tiles(cta, mp.FC):
                u = torch.full((B, n), math.nan, dtype=torch.float64)
                for rows, row0, blk in blocks(cta, n):
                    at = j + row0 + torch.arange(rows)
                    u[:, row0:row0 + rows] = torch.nn.functional.gelu(h_mid @ blk.T + bias("B_FC", layer, at))
                for rows, row0, blk in blocks(cta, n, False):
                    x = x + u[:, row0:row0 + rows] @ blk
    h_out = layer_norm(x, vec("LNF_W"), vec("LNF_B"), eps)
    logits = torch.full((B, p.V), math.nan, dtype=torch.float64)
    for cta in range(p.grid):
        for v0, n, *_ in tiles(cta, mp.HEAD):
            for rows, row0, blk in blocks(cta, n):
                logits[:, v0 + row0:v0 + row0 + rows] = h_out @ blk.T
    assert cursor == [rec[0] + rec[14] for rec in p.cta]  # every block of every stream read, once
    return logits


@pytest.mark.parametrize("batch,grid,smem,bias,pos,fused", [
    (1, 7, 232448, True, 20, None),  # resident: every stream fits the ring; batch 1: the fused projection
    (1, 7, 232448, True, 20, False),  # the same through proj tiles
    (3, 5, 24 << 10, False, 31, None),  # streamed through slots smaller than a tile, the cache full
    (8, 3, 40 << 10, True, 0, None),  # several tiles and items a CTA, the first slot
    (2, 40, 232448, True, 9, None),  # more CTAs than some phases have tiles; splits past pos are empty
    (2, 5, 24 << 10, True, 9, True),  # fused at batch 2, streamed
])
def test_emulated_step_matches_the_float64_model(batch, grid, smem, bias, pos, fused):
    m = gpt(bias=bias)
    p = mp.plan(64, 4, 2, 20, 32, batch, grid, 4, smem, fused)
    assert p.fused == (batch == 1 if fused is None else fused)
    assert p.resident == (smem > 100 << 10) and p.smem <= smem
    w = kernel_weights(m)
    packed = mp.pack(p, w)
    idx = torch.randint(20, (batch, pos + 1))
    with torch.no_grad():
        ref = m.double()(idx)[0][:, -1]
        m.float()
    # the caches of slots < pos, from the model's own keys and values (float64)
    kc = torch.zeros(2, batch, 4, 32, 16, dtype=torch.float64)
    vc = torch.zeros_like(kc)
    with torch.no_grad():
        x = m.double().wte(idx) + m.wpe(torch.arange(pos + 1))
        for layer, block in enumerate(m.blocks):
            a = block.attn
            k, v = a.c_attn(block.ln_1(x)).split(64, dim=2)[1:]
            kc[layer, :, :, :pos + 1] = k.view(batch, pos + 1, 4, 16).transpose(1, 2)
            vc[layer, :, :, :pos + 1] = v.view(batch, pos + 1, 4, 16).transpose(1, 2)
            x = block(x)
        x0 = m.wte(idx[:, -1]) + m.wpe(torch.tensor(pos))
        m.float()
    kc[:, :, :, pos:] = vc[:, :, :, pos:] = math.nan  # the step writes its own slot; nothing reads beyond it
    logits = emulate_step(p, packed, w, x0.double(), kc, vc, pos, m.ln_f.eps, m.blocks[0].attn.scale)
    assert (logits - ref).abs().max().item() < 1e-5


def test_emulator_catches_a_misplaced_block():
    """The planted fault: two blocks of an fc tile swapped in the packed bytes."""
    m = gpt()
    p = mp.plan(64, 4, 2, 20, 32, 1, 3, 4, 24 << 10)
    w = kernel_weights(m)
    packed = mp.pack(p, w)
    idx = torch.randint(20, (1, 1))
    with torch.no_grad():
        ref = m.double()(idx)[0][:, -1]
        x0 = m.wte(idx[:, -1]) + m.wpe(torch.tensor(0))
        m.float()
    fc = [i for i in range(p.cta[1][0], p.cta[1][0] + p.cta[1][14]) if p.sources[i][0] == "W_FC"]
    a, b = p.blocks[fc[0]], p.blocks[fc[1]]
    start = p.cta[1][2] * 16
    span = min(a[2], b[2]) * 64 * 4  # the first rows of two blocks of an fc tile
    at_a, at_b = start + a[0] * p.cta[1][16] + a[1], start + b[0] * p.cta[1][16] + b[1]
    swapped = packed.clone()
    swapped[at_a:at_a + span], swapped[at_b:at_b + span] = packed[at_b:at_b + span], packed[at_a:at_a + span]
    kc = torch.zeros(2, 1, 4, 32, 16, dtype=torch.float64)
    args = (w, x0.double(), kc, torch.zeros_like(kc), 0, m.ln_f.eps, m.blocks[0].attn.scale)
    assert (emulate_step(p, packed, *args) - ref).abs().max() < 1e-5
    assert (emulate_step(p, swapped, *args) - ref).abs().max() > 1e-3


def test_plan_covers_every_row_once_at_the_study_sizes():
    for C, H, L, B in ((384, 6, 6, 1), (384, 6, 6, 8), (768, 12, 12, 4), (1152, 18, 18, 8)):
        p = mp.plan(C, H, L, 65, 256, B, 132, 2, 232448)
        assert p.smem <= 232448 and (p.resident or p.slots >= 2)
        rows = {}
        for matrix, layer, first, n, *_ in p.sources:
            rows.setdefault((matrix, layer), []).extend(range(first, first + n))
        assert sorted(rows["W_QKV", 0]) == list(range(3 * C))
        o = rows["W_O_HEADS", L - 1] if B == 1 else rows["W_O", L - 1]  # batch 1: each head's columns, C rows each
        assert sorted(o) == list(range(H * C if B == 1 else C))
        assert sorted(rows["W_FC", 1]) == sorted(rows["W_P2T", 1]) == list(range(4 * C))
        assert sorted(rows["WTE", None]) == list(range(65))
        for record in p.cta:  # no block straddles a packet
            for (_, offset, n, _), source in zip(p.blocks[record[0]:record[0] + record[14]],
                                                 p.sources[record[0]:record[0] + record[14]]):
                assert offset + n * source[-1] * 2 <= record[16] and offset % 16 == 0
    seed = mp.plan(384, 6, 6, 65, 256, 1, 132, 2, 232448)  # the seed GPT's bf16 weights stay in place,
    assert seed.resident_share == 126 / 132  # but for the six CTAs of the fused projection's heads
    assert mp.plan(384, 6, 6, 65, 256, 8, 132, 2, 232448).resident


@pytest.mark.parametrize("C,H,B,message", [
    (60, 6, 1, "must be multiples of 8"), (384, 6, 9, "batch_size=9: the megakernel computes 1 to 8"),
    (4096, 16, 1, "n_embd <= 2048"),
])
def test_plan_refuses_what_the_kernel_cannot_take(C, H, B, message):
    with pytest.raises(ValueError, match=message):
        mp.plan(C, H, 2, 65, 256, B, 132, 2, 232448)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU refusal")
def test_megakernel_needs_cuda_and_a_gpt():
    with pytest.raises(BackendUnavailable, match="decode=megakernel needs a CUDA GPU"):
        check(make_cfg("decode=megakernel", "model=gpt"), torch.device("cpu"))
    with pytest.raises(ValueError, match="decode=megakernel runs GPT blocks"):
        check(make_cfg("decode=megakernel", "model=bigram", "train=bigram"), torch.device("cpu"))
    with pytest.raises(ValueError, match="batch_size=9"):
        check(make_cfg("decode=megakernel", "model=gpt", "generate.batch_size=9"), torch.device("cpu"))


# ---- GPU -----------------------------------------------------------------------------------------

def parity_run(m, batch, total, prompt_len, smem=None, **kw):
    from transformerop.decode.megakernel import Megakernel
    from transformerop.decode.parity import parity
    Megakernel.smem_limit = smem
    try:
        dec = Decoder(m, "megakernel", batch, total, **kw)
        g = torch.Generator(device="cuda").manual_seed(3)
        prompt = torch.randint(m.vocab_size, (batch, prompt_len), device="cuda", generator=g)
        seeded = (lambda: torch.Generator(device="cuda").manual_seed(5)) if kw.get("temperature", 0) > 0 else None
        dtype = "bfloat16" if next(m.parameters()).dtype == torch.bfloat16 else "float32"
        out = parity(m, dec, prompt, total - prompt_len, dtype, seeded)
        assert dec.runner.error() == 0
        return out, dec.runner.plan
    finally:
        Megakernel.smem_limit = None


@pytest.mark.gpu
@pytest.mark.parametrize("batch", [1, 3, 8])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_megakernel_matches_recompute_on_the_gpu(batch, dtype):
    m = gpt(n_layer=3, n_head=6, n_embd=96, block_size=64, vocab=65).cuda().to(dtype)
    greedy, plan = parity_run(m, batch, 150, 10, temperature=0)  # two window restarts, three launches
    assert greedy["parity_tokens_agree"] == 140 or "parity_near_tie_gap" in greedy
    assert plan.resident and plan.fused == (batch == 1)
    if dtype == torch.float32:  # sampled with top-k: the same text, token for token
        sampled, _ = parity_run(m, batch, 90, 10, temperature=0.8, top_k=7)
        assert sampled["parity_tokens_agree"] == 80 or "parity_near_tie_gap" in sampled
    streamed, plan = parity_run(m, batch, 100, 10, smem=20 << 10, temperature=0)  # some CTAs stream their weights
    assert plan.resident or plan.slots >= 2


@pytest.mark.gpu
def test_megakernel_at_the_seed_shape_bias_free_and_sampled():
    m = gpt(n_layer=6, n_head=6, n_embd=384, block_size=256, bias=False, vocab=65).cuda().to(torch.bfloat16)
    out, plan = parity_run(m, 1, 300, 1, temperature=1.0)
    assert out["parity_tokens_agree"] == 299 or "parity_near_tie_gap" in out
    assert plan.fused and plan.resident_share > 0.9
    from transformerop.decode.megakernel import Megakernel
    Megakernel.fused = False  # the projection in tiles instead, the attention in splits
    try:
        out, plan = parity_run(m, 1, 300, 1, temperature=0)
    finally:
        Megakernel.fused = None
    assert out["parity_tokens_agree"] == 299 or "parity_near_tie_gap" in out
    assert not plan.fused and plan.splits > 1


def test_the_extension_source_is_one_file_that_compiles(tmp_path):
    """load_inline gets one self-contained .cu (every header of ours inlined, once): plain nvcc
    for sm_90 must build it as it is."""
    from kernels import cuda_build, megakernel
    cpp, cu = megakernel.sources()
    assert '#include "' not in cu[0] and '#include "' not in cpp[0]
    if cuda_build.find_nvcc() is None:
        pytest.skip("nvcc not installed (no CUDA toolkit)")
    path = tmp_path / "megakernel_inlined.cu"
    path.write_text(cu[0])
    cuda_build.nvcc_compile_check(path)
