"""decode=persistent: the one-launch decode run agrees with recompute token for token (fp32, greedy
and sampled with top-k, past block_size) and with the static path's logits. On CPU the kernel runs
under TRITON_INTERPRET=1 in a subprocess, one program (the barriers pass at once); hand-set tiles
make every loop of the kernel run more than once. A compile for sm_90 (no GPU needed) checks what
the interpreter cannot: the kernel compiles and fits the H200's shared memory.
On a GPU: the real grid, fp32 and bf16, batch 1 to 8, a wider model."""
import itertools
import os
import re

import pytest
import torch
from conftest import compile_for_h200, interpreted, make_cfg, script_result

from transformerop.decode import check
from transformerop.model import BackendUnavailable

CHECK = """
import torch
from omegaconf import OmegaConf
from transformerop.model import build_model
from transformerop.decode import Decoder
from transformerop.decode.persistent_plan import plan
torch.manual_seed(0)

def model(bias, n_embd, block_size):
    cfg = OmegaConf.create({{"model": {{"name": "gpt", "n_layer": 2, "n_head": 4, "n_embd": n_embd,
                                       "block_size": block_size, "dropout": 0.0, "bias": bias}},
                            "attention": {{"name": "sdpa"}}}})
    m = build_model(cfg, 20).eval()
    with torch.no_grad():  # non-trivial LayerNorm parameters (they start at 1 and 0)
        for p in m.parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p) * 0.1)
    return m

def run(m, path, batch, total, tiles=None, **kw):
    logits = []
    dec = Decoder(m, path, batch, total, **kw)
    if tiles:
        dec.runner.set_tiles(tiles)
    g = torch.Generator().manual_seed(3) if kw.get("temperature", 0) > 0 else None
    out = dec(prompt[:batch], g, on_logits=lambda i, x: logits.append(x.float().clone()))
    return out.clone(), torch.stack(logits)

prompt = torch.randint(20, (3, 5))
m = model(True, 32, 16)
ref, ref_logits = run(m, "recompute", 2, 5 + 30, temperature=0)
static, static_logits = run(m, "static", 2, 5 + 30, temperature=0)
mine, mine_logits = run(m, "persistent", 2, 5 + 30, temperature=0)
print("TOKENS", torch.equal(mine, ref))
print("LOGITS", (mine_logits - static_logits).abs().max().item())
sampled = [run(m, p, 2, 40, temperature=0.8, top_k=5)[0] for p in ("recompute", "persistent")]
print("SAMPLED", torch.equal(*sampled))
plain = [run(m, p, 2, 12, temperature=1.3)[0] for p in ("recompute", "persistent")]
print("SAMPLED_NO_TOP_K", torch.equal(*plain))
# a bias-free model, 40 cached tokens, with hand-set tiles so that every loop of the kernel runs
# more than once: several tiles per program, reduction chunks (BK < K), output chunks in the MLP's
# second product, two attention splits each looping over slot blocks, top-k candidate chunks; at
# batch 3 on the tensor-core form (DOT), at batch 1 on the multiply-add form (the first model ran
# the one-tile form of every phase, its weights loaded ahead)
m = model(False, 64, 64)
prompt = torch.randint(20, (3, 40))
def mlp(batch):  # the MLP in the rest of the phases' form: on one program every plan counts many rounds
    return {{"DOT_FC": batch > 1}}

loops = {{"BT": 16, "BN_QKV": 16, "SPAN_QKV": 16, "SPAN_FC": 64, "BK_QKV": 32, "O_CHUNKS": 3, "BN_O": 16, "BN_FC": 64,
         "BK_FC": 32, "BC_FC": 32, "BN_V": 16, "CH": 8, "ONE_QKV": False, "ONE_O": False, "ONE_FC": False, "ONE_V": False, "AHEAD": False}}
for batch in (3, 1):  # each weight chunk loaded one ahead, across tiles and from W_fc's to W_proj2's
    tiles = {{**plan(64, 4, 20, 64, batch, 1, by_hand=mlp(batch)), **loops, "AHEAD": True}}
    ref, ref_logits = run(m, "recompute", batch, 40 + 8, temperature=0)
    mine, mine_logits = run(m, "persistent", batch, 40 + 8, tiles=tiles, temperature=0)
    print(f"TILED_TOKENS_{{batch}}", torch.equal(mine, ref), tiles["DOT"], (mine_logits - ref_logits).abs().max().item())
for batch in (3, 1):  # tiles of fewer rows than their BN (SPAN, masked): 12 of 16 in the qkv phase, 40 of 64 in the MLP;
    # and the stream slots in 4 copies (one program adds into the first; the readers sum all four)
    tiles = {{**plan(64, 4, 20, 64, batch, 1, by_hand=mlp(batch)), **loops, "SPAN_QKV": 12, "SPAN_FC": 40, "REPS": 4}}
    ref, ref_logits = run(m, "recompute", batch, 40 + 8, temperature=0)
    mine, mine_logits = run(m, "persistent", batch, 40 + 8, tiles=tiles, temperature=0)
    print(f"SPAN_{{batch}}", torch.equal(mine, ref), (mine_logits - ref_logits).abs().max().item())
for batch in (3, 1):  # each loop's first chunk before the pipelined loop (PRE_*), the first tile's loaded ahead
    tiles = {{**plan(64, 4, 20, 64, batch, 1, by_hand=mlp(batch)), **loops, "AHEAD_FC": False, "PRE_QKV": True,
              "PRE_FC": True, "PRE_P2": True}}
    ref, ref_logits = run(m, "recompute", batch, 40 + 8, temperature=0)
    mine, mine_logits = run(m, "persistent", batch, 40 + 8, tiles=tiles, temperature=0)
    print(f"PRE_{{batch}}", torch.equal(mine, ref), (mine_logits - ref_logits).abs().max().item())
for batch in (3, 1):  # W_QKV, W_fc and W_P2T stored chunk by chunk, W_proj head-major (PACK_*); at batch 1 one ahead
    tiles = {{**plan(64, 4, 20, 64, batch, 1, by_hand=mlp(batch)), **loops, "AHEAD": batch == 1, "PACK_QKV": True,
              "PACK_FC": True, "PACK_O": True}}
    ref, ref_logits = run(m, "recompute", batch, 40 + 8, temperature=0)
    mine, mine_logits = run(m, "persistent", batch, 40 + 8, tiles=tiles, temperature=0)
    print(f"PACKED_{{batch}}", torch.equal(mine, ref), (mine_logits - ref_logits).abs().max().item())
dec = Decoder(m, "persistent", 1, 40 + 8, temperature=0)  # packed, then tiles that read rows: the rows come back
rows = {{k: dec.runner.w[k].clone() for k in ("W_QKV", "W_FC", "W_P2T", "W_O")}}
dec.runner.set_tiles(tiles)
moved = sum(not torch.equal(dec.runner.w[k], rows[k]) for k in rows)
dec.runner.set_tiles({{**tiles, "PACK_QKV": False, "PACK_FC": False, "PACK_O": False}})
print("UNPACKED", moved, all(torch.equal(dec.runner.w[k], rows[k]) for k in rows))
# the LayerNorms after the products (FOLD_*), both forms, tiled as above, with biases (c holds them)
mb = model(True, 64, 64)
for batch in (3, 1):
    ref, ref_logits = run(mb, "recompute", batch, 40 + 8, temperature=0)
    for form in (1, 2):  # COPY: the first tile's slot copied for the later ones; SLOT: every tile reads the slot
        tiles = {{**plan(64, 4, 20, 64, batch, 1, by_hand=mlp(batch)), **loops, "FOLD_QKV": form, "FOLD_FC": form,
                  "FOLD_V": form}}
        mine, mine_logits = run(mb, "persistent", batch, 40 + 8, tiles=tiles, temperature=0)
        print(f"FOLD_{{form}}_{{batch}}", torch.equal(mine, ref), (mine_logits - ref_logits).abs().max().item())
# batch 1, the MLP's shares summed over a program's tiles and added once (ADD_ONCE: one output chunk)
tiles = {{**plan(64, 4, 20, 64, 1, 1, by_hand=mlp(1)), **loops, "BN_FC": 16, "SPAN_FC": 16, "BK_FC": 64, "BC_FC": 64, "AHEAD": True, "ADD_ONCE": True}}
mine, mine_logits = run(mb, "persistent", 1, 40 + 8, tiles=tiles, temperature=0)
print("ADD_ONCE", torch.equal(mine, ref), (mine_logits - ref_logits).abs().max().item())
# decode.fold_ln=false from the config, with the plan's own tiles (which fold the qkv phase at
# batch 1 and 3, and the MLP at batch 3)
for batch, levers in ((1, {{"fold_ln": False}}), (3, {{"fold_ln": False}})):
    ref, ref_logits = run(mb, "recompute", batch, 40 + 8, temperature=0)
    dec = Decoder(mb, "persistent", batch, 40 + 8, temperature=0, dcfg=OmegaConf.create(levers))
    logits = []
    mine = dec(prompt[:batch], None, on_logits=lambda i, x: logits.append(x.float().clone()))
    t = dec.runner.tiles
    print(f"LEVERS_{{batch}}", torch.equal(mine, ref), t["FOLD_QKV"] + t["FOLD_FC"] + t["FOLD_V"],
          (torch.stack(logits) - ref_logits).abs().max().item())
# decode.tiles from the config: the tensor-core form planned at batch 1 (DOT), its MLP pipelined two deep
ref, ref_logits = run(mb, "recompute", 1, 40 + 8, temperature=0)
dec = Decoder(mb, "persistent", 1, 40 + 8, temperature=0, dcfg=OmegaConf.create({{"tiles": {{"DOT": True, "STAGES": 2}}}}))
logits = []
mine = dec(prompt[:1], None, on_logits=lambda i, x: logits.append(x.float().clone()))
t = dec.runner.tiles
print("BY_HAND", torch.equal(mine, ref), t["DOT"], t["B_PAD"], t["STAGES"], (torch.stack(logits) - ref_logits).abs().max().item())
# the MLP alone on the tensor cores at batch 1 (DOT_FC), its loops run over several tiles and chunks, pipelined
dec = Decoder(mb, "persistent", 1, 40 + 8, temperature=0,
              dcfg=OmegaConf.create({{"tiles": {{"DOT_FC": True, "BN_FC": 16, "BK_FC": 16, "STAGES": 2}}}}))
logits = []
mine = dec(prompt[:1], None, on_logits=lambda i, x: logits.append(x.float().clone()))
t = dec.runner.tiles
print("BY_HAND_MLP", torch.equal(mine, ref), t["DOT"], t["DOT_FC"], t["B_PAD_FC"], t["AHEAD_FC"],
      (torch.stack(logits) - ref_logits).abs().max().item())
# and the multiply-add form at batch 3 (its rows padded to 4, not 1)
ref, ref_logits = run(mb, "recompute", 3, 40 + 8, temperature=0)
dec = Decoder(mb, "persistent", 3, 40 + 8, temperature=0, dcfg=OmegaConf.create({{"tiles": {{"DOT": False}}}}))
logits = []
mine = dec(prompt[:3], None, on_logits=lambda i, x: logits.append(x.float().clone()))
t = dec.runner.tiles
print("BY_HAND_FMA", torch.equal(mine, ref), t["DOT"], t["B_PAD"], (torch.stack(logits) - ref_logits).abs().max().item())
tiles = {{**plan(64, 4, 20, 64, 3, 1), **loops}}
sampled = [run(m, p, 3, 40 + 8, tiles=tiles if p == "persistent" else None, temperature=0.7, top_k=4)[0]
           for p in ("recompute", "persistent")]
print("TILED_SAMPLED", torch.equal(*sampled))
# the projection shared by the rows (decode.attn_proj=head): attention outputs through Y and its
# counters, then (head, chunk) items for every row, tiled as above; tokens and logits
head = OmegaConf.create({{"attn_proj": "head"}})
for batch in (3, 1):
    ref, ref_logits = run(m, "recompute", batch, 40 + 8, temperature=0)
    tiles = {{**plan(64, 4, 20, 64, batch, 1, proj="head", by_hand=mlp(batch)), **loops}}
    mine, mine_logits = run(m, "persistent", batch, 40 + 8, tiles=tiles, temperature=0, dcfg=head)
    print(f"SHARED_{{batch}}", torch.equal(mine, ref), tiles["SHARED_O"], (mine_logits - ref_logits).abs().max().item())
# the same with the plan's own tiles: the whole window one block, its keys loaded ahead
ref, ref_logits = run(m, "recompute", 3, 40 + 8, temperature=0)
tiles = plan(64, 4, 20, 64, 3, 1, proj="head")
mine, mine_logits = run(m, "persistent", 3, 40 + 8, tiles=tiles, temperature=0, dcfg=head)
print("SHARED_AHEAD", torch.equal(mine, ref), tiles["BT"] >= 64, (mine_logits - ref_logits).abs().max().item())
# the attention in SPLIT equal runs of slots, each run a program's, here all of them on the one: runs
# that end mid-item and items whose slots meet two or more runs, their shares combined by the
# projection's items; in blocks of 16 slots and in one block of the window
for batch, split, bt in ((3, 5, 16), (1, 7, 64)):
    ref, ref_logits = run(m, "recompute", batch, 40 + 8, temperature=0)
    tiles = {{**plan(64, 4, 20, 64, batch, 1, proj="head", by_hand=mlp(batch)), **loops, "BT": bt, "SPLIT": split}}
    mine, mine_logits = run(m, "persistent", batch, 40 + 8, tiles=tiles, temperature=0, dcfg=head)
    print(f"SPLIT_{{batch}}", torch.equal(mine, ref), (mine_logits - ref_logits).abs().max().item())
"""


def test_persistent_matches_recompute_under_the_triton_interpreter():
    lines = interpreted(CHECK.format())
    assert lines["TOKENS"] == "True"  # 30 greedy tokens past block_size 16: two launches and a re-prefill
    assert float(lines["LOGITS"]) < 1e-5
    assert lines["SAMPLED"] == "True"  # same seed, same Gumbel noise, same top-k cut, same text
    assert lines["SAMPLED_NO_TOP_K"] == "True"
    # tokens and logits: the first chunk of W_proj2 loaded one ahead from the wrong columns kept the
    # tokens and moved the logits by 0.23
    for batch, dot in ((3, "True"), (1, "False")):  # tensor cores, multiply-adds
        tokens, form, diff = lines[f"TILED_TOKENS_{batch}"].split()
        assert (tokens, form) == ("True", dot) and float(diff) < 1e-5
    for batch, key in itertools.product((3, 1), ("SPAN", "PRE")):
        tokens, diff = lines[f"{key}_{batch}"].split()
        assert tokens == "True" and float(diff) < 1e-5, key
    for batch in (3, 1):
        tokens, diff = lines[f"PACKED_{batch}"].split()
        assert tokens == "True" and float(diff) < 1e-5
    assert lines["UNPACKED"] == "4 True"  # all four matrices were stored otherwise, and came back exactly
    for form, batch in itertools.product((1, 2), (3, 1)):  # c dropped from the folded epilogue moved logits by 0.5
        tokens, diff = lines[f"FOLD_{form}_{batch}"].split()
        assert tokens == "True" and float(diff) < 1e-5
    tokens, diff = lines["ADD_ONCE"].split()
    assert tokens == "True" and float(diff) < 1e-5
    for batch in (1, 3):  # the config reaches the plan: no phase folded
        tokens, folds, diff = lines[f"LEVERS_{batch}"].split()
        assert (tokens, folds) == ("True", "0") and float(diff) < 1e-5
    tokens, dot, b_pad, stages, diff = lines["BY_HAND"].split()  # decode.tiles reaches the plan, DOT re-plans
    assert (tokens, dot, b_pad, stages) == ("True", "True", "16", "2") and float(diff) < 1e-5
    tokens, dot, dot_fc, b_pad_fc, ahead_fc, diff = lines["BY_HAND_MLP"].split()
    assert (tokens, dot, dot_fc, b_pad_fc, ahead_fc) == ("True", "False", "True", "16", "False") and float(diff) < 1e-5
    tokens, dot, b_pad, diff = lines["BY_HAND_FMA"].split()  # B_PAD 1 here computed row 0 alone
    assert (tokens, dot, b_pad) == ("True", "False", "4") and float(diff) < 1e-5
    assert lines["TILED_SAMPLED"] == "True"
    for batch in (3, 1):  # tokens alone are not enough: a wrong head's y kept them and moved logits by 0.16
        tokens, shared, diff = lines[f"SHARED_{batch}"].split()
        assert (tokens, shared) == ("True", "True") and float(diff) < 1e-5
    tokens, ahead, diff = lines["SHARED_AHEAD"].split()
    assert (tokens, ahead) == ("True", "True") and float(diff) < 1e-5
    for batch in (3, 1):
        tokens, diff = lines[f"SPLIT_{batch}"].split()
        assert tokens == "True" and float(diff) < 1e-5


def test_persistent_needs_cuda_or_the_interpreter_and_a_gpt(monkeypatch):
    if torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("this checks the CPU refusal")
    with pytest.raises(BackendUnavailable, match="decode=persistent needs CUDA"):
        check(make_cfg("decode=persistent"), torch.device("cpu"))
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with pytest.raises(ValueError, match="decode=persistent runs GPT blocks"):
        check(make_cfg("decode=persistent", "model=bigram", "train=bigram"), torch.device("cpu"))
    fp32 = ("decode=persistent", "model=gpt", "train.dtype=float32")
    check(make_cfg(*fp32, "+decode.tiles.STAGES=2", "+decode.tiles.DOT=true"), torch.device("cpu"))  # plan keys pass
    for tiles, message in ((["STAGE=2"], "decode.tiles.STAGE: not a plan key you can set; they are DOT, "),
                           (["B_PAD=16"], "decode.tiles.B_PAD: not a plan key you can set"),  # follows from DOT
                           (["BN_FC=wide"], "decode.tiles.BN_FC='wide': it takes an integer"),
                           (["DOT=1"], "decode.tiles.DOT=1: it takes true or false"),
                           (["BN_FC=48"], "decode.tiles.BN_FC=48: it takes a power of two, at least 1"),
                           (["STAGES=9"], "decode.tiles.STAGES=9: it takes 1 to 6"),
                           (["DOT=true", "BN_FC=8"], "decode.tiles (DOT=True, BN_FC=8): a tensor-core tile has 16"),
                           (["DOT_FC=true", "BN_FC=8"], "decode.tiles (DOT_FC=True, BN_FC=8): a tensor-core tile"),
                           (["ADD_ONCE=true", "DOT=true"], "ADD_ONCE needs the multiply-add form"),
                           (["DOT_FC=false", "PRE_FC=true"], "PRE_FC and PRE_P2 need an MLP loop without ONE or AHEAD"),
                           (["PRE_QKV=true"], "PRE_QKV needs a qkv loop without ONE or AHEAD"),
                           (["SPLIT_KV=true", "SHARED_O=false"], "SPLIT_KV needs the shared projection (SHARED_O)"),
                           (["L2_NEXT=true"], "decode.tiles.L2_NEXT=true: a PTX prefetch, for a CUDA GPU; the Triton "
                                              "interpreter cannot run it")):
        with pytest.raises(ValueError, match=re.escape(message)):
            check(make_cfg(*fp32, *(f"+decode.tiles.{t}" for t in tiles)), torch.device("cpu"))
    with pytest.raises(ValueError, match=re.escape("decode.tiles (FOLD_FC=1): a phase of one round")):
        # 64 wide: the MLP is one tile of one chunk (ONE_FC) even on the interpreter's one program
        check(make_cfg(*fp32, "model.n_embd=64", "model.n_head=4", "+decode.tiles.FOLD_FC=1"), torch.device("cpu"))
    with pytest.raises(ValueError, match=r"\(DOT_FC=False, BC_FC=1024\): chunks loaded one ahead \(AHEAD\) need BC_FC"):
        # 1152 wide, batch 1, the MLP on the multiply-adds
        check(make_cfg(*fp32, "model=gpt_3x", "+decode.tiles.DOT_FC=false", "+decode.tiles.BC_FC=1024"),
              torch.device("cpu"))


@pytest.mark.parametrize("C,L,H,batch,dtype,cost,proj", [
    (384, 6, 6, 1, "bf16", "rounds", "row"), (384, 6, 6, 8, "bf16", "rounds", "row"),
    (1152, 18, 18, 4, "bf16", "rounds", "row"), (1152, 18, 18, 8, "bf16", "bytes", "row"),
    (768, 4, 12, 3, "fp32", "rounds", "row"), (1152, 18, 18, 8, "bf16", "bytes", "head"),
    (384, 6, 6, 1, "bf16", "bytes", "head"), (1152, 2, 18, 3, "fp32", "bytes", "auto"),
    (1152, 18, 18, 1, "bf16", "bytes", "row"), (768, 12, 12, 8, "bf16", "bytes", "auto"),
    (1152, 18, 18, 1, "bf16", "bytes", "auto"), (1152, 18, 18, 8, "bf16", "bytes", "auto")])
def test_the_kernel_compiles_for_the_h200_and_fits_its_shared_memory(C, L, H, batch, dtype, cost, proj):
    """conftest.compile_for_h200 at the plan's tiles, its pipelined weight chunks (STAGES) in the
    H200's shared memory, a pipelined MLP loop's W_fc chunks streamed through them (async copies
    into STAGES - 1 buffers or more, not loads into registers); fp32 at 1152 wide, batch 3,
    pipelined three deep as the GPU test forces it (the plan does not pipeline fp32), the most
    shared memory the loops can ask for; 1152 wide
    at batch 1, its chunks loaded one ahead over several tiles (AHEAD) and its MLP's shares added
    once a program (ADD_ONCE), the MLP by hand on the multiply-adds; 768 wide at batch 8, its MLP
    pipelined two deep over three chunks, each loop's first chunk loaded at the barrier (PRE_*);
    1152 wide at batch 8, the next phase's weights asked of L2 as a phase opens (L2_NEXT);
    1152 wide at batch 1 as planned: the MLP alone on the tensor cores (DOT_FC), pipelined three
    deep, the qkv tiles 28 rows of 32 (SPAN_QKV); 1152 wide at batch 4 and 384 wide at batch 1
    with the weights packed (PACK: the qkv and MLP chunks one run each, W_proj head-major, loaded
    at the barrier at 384 wide); 1152 wide at batch 8 with the attention in runs (SPLIT_KV)."""
    from kernels import triton_persistent as k
    from transformerop.decode.persistent_plan import plan
    by_hand = {(1152, 1, "row"): {"DOT_FC": False},  # the plan's MLP is on the tensor cores there
               (768, 8, "auto"): {"PRE_QKV": True, "PRE_FC": True, "PRE_P2": True},
               (1152, 8, "head"): {"L2_NEXT": True},
               (1152, 4, "row"): {"PACK": True}, (384, 1, "row"): {"PACK": True},
               (1152, 8, "auto"): {"SPLIT_KV": True}}.get((C, batch, proj), {})
    tiles = plan(C, H, 65, 256, batch, 132, cost=cost, proj=proj, elem=4 if dtype == "fp32" else 2, by_hand=by_hand)
    assert tiles["SPLIT"] == (132 if by_hand.get("SPLIT_KV") else 0)  # runs with the shared projection only
    if dtype == "fp32" and proj == "auto":
        tiles["STAGES"] = 3
    if (C, batch, proj) == (1152, 1, "row"):  # the MLP's shares added once a program (ADD_ONCE; its one chunk covers C)
        tiles["ADD_ONCE"] = True
    options = {"num_warps": tiles.pop("num_warps"), "num_stages": tiles.pop("num_stages")}
    const = {"NB": batch, "C": C, "H": H, "L": L, "V": 65, "W_CACHE": 256, "TOTAL": 501, **tiles, "HAS_BIAS": True,
             "HAS_LN_B": True, "GREEDY": False, "TOP_K": True, "PROFILE": True,
             "PREC": "ieee" if dtype == "fp32" else "tf32"}
    fixed = {"OUT": "*i64", "T_PTR": "*i64", "POS_PTR": "*i64", "BAR": "*i32", "PROF": "*i64", "n_steps": "i32",
             "top_k": "i32", "temperature": "fp32", "eps": "fp32", "scale": "fp32", "NOISE": "*fp32",
             "LOGITS": "*fp32", "CNT": "*i32", "STREAM": "*fp32", "QKV": "*fp32", "XS": "*fp32", "Y": "*fp32",
             "FOLD": "*fp32"}
    sig = {n: "constexpr" if n in const else fixed.get(n, f"*{dtype}") for n in k._decode_run_kernel.arg_names}
    compiled = compile_for_h200(k._decode_run_kernel, sig, const, options)
    ptx = compiled.asm["ptx"]
    # a pipelined MLP loop streams its W_fc chunks through STAGES - 1 buffers or more of shared memory
    if tiles["DOT_FC"] and tiles["STAGES"] > 1 and dtype == "bf16":
        chunk = f"x{tiles['BN_FC']}x{tiles['BK_FC']}xbf16"
        allocs = r"local_alloc : \(\) -> !ttg\.memdesc<(\d+)" + chunk
        buffers = [int(m) for m in re.findall(allocs, compiled.asm["ttgir"])]
        assert buffers and max(buffers) >= tiles["STAGES"] - 1, (chunk, buffers)
    # L2_NEXT: four prefetch loops a layer (W_proj's chunk, W_fc's and W_proj2's rows, the next layer's W_qkv's)
    assert ptx.count("prefetch.global.L2") >= (4 if tiles["L2_NEXT"] else 0) and \
        ("prefetch.global.L2" in ptx) == tiles["L2_NEXT"]


@pytest.mark.parametrize("bias", [True, False])
def test_the_folded_layer_norms_give_the_layer_norm_then_the_product(bias):
    """LN(x) W^T + b in float64 (F.layer_norm, F.linear on the model's own modules) equals
    rstd (x*g W^T - mean u) + c with folded_norms' u and c, for every LayerNorm and the product
    after it: qkv (rows head-major), W_fc and the tied head."""
    import torch.nn.functional as F

    from transformerop.decode.persistent import folded_norms
    from transformerop.model import build_model
    torch.manual_seed(0)
    C, H, L, V = 64, 4, 2, 20
    m = build_model(make_cfg("model=gpt", f"model.n_embd={C}", f"model.n_head={H}", f"model.n_layer={L}",
                             "model.block_size=16", f"model.bias={bias}"), V).eval()
    with torch.no_grad():  # LayerNorm parameters away from 1 and 0
        for p in m.parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p) * 0.3)
    head_major = torch.arange(3 * C).view(3, H, C // H).transpose(0, 1).reshape(-1)
    pairs = []
    for blk in m.blocks:
        fc = blk.mlp.c_fc
        qkv_b = None if blk.attn.c_attn.bias is None else blk.attn.c_attn.bias[head_major]
        pairs += [(blk.ln_1, blk.attn.c_attn.weight[head_major], qkv_b), (blk.ln_2, fc.weight, fc.bias)]
    pairs.append((m.ln_f, m.wte.weight, None))
    w = {"W_QKV": torch.stack([b.attn.c_attn.weight[head_major] for b in m.blocks]),
         "W_FC": torch.stack([b.mlp.c_fc.weight for b in m.blocks]),
         "LN1_W": torch.stack([b.ln_1.weight for b in m.blocks]), "LN2_W": torch.stack([b.ln_2.weight for b in m.blocks]),
         "WTE": m.wte.weight, "LNF_W": m.ln_f.weight}
    if bias:
        w.update(B_QKV=torch.stack([b.attn.c_attn.bias[head_major] for b in m.blocks]),
                 B_FC=torch.stack([b.mlp.c_fc.bias for b in m.blocks]),
                 LN1_B=torch.stack([b.ln_1.bias for b in m.blocks]), LN2_B=torch.stack([b.ln_2.bias for b in m.blocks]),
                 LNF_B=m.ln_f.bias)
    with torch.no_grad():
        folded = folded_norms(w, L, bias, bias).double()
        x = torch.randn(5, C, dtype=torch.float64) * 2 + 0.5  # rows with a mean away from zero
        mean, var = x.mean(1, keepdim=True), x.var(1, unbiased=False, keepdim=True)
        rstd = 1 / torch.sqrt(var + m.ln_f.eps)
        at = 0
        for ln, W, b in pairs:
            N = W.size(0)
            u, c = folded[at:at + N], folded[at + N:at + 2 * N]
            at += 2 * N
            ref = F.linear(F.layer_norm(x, (C,), ln.weight.double(), None if ln.bias is None else ln.bias.double(),
                                        ln.eps), W.double(), None if b is None else b.double())
            mine = rstd * ((x * ln.weight.double()) @ W.double().T - mean * u) + c
            assert torch.allclose(mine, ref, rtol=0, atol=1e-5), (ref - mine).abs().max()
        assert at == folded.numel() == L * 14 * C + 2 * V


def test_phase_times_from_the_profiled_buffers():
    """Two layers, two programs, two launches (2 steps, then 1): the stamps' differences by kind,
    and per phase the busiest program's mean time, worked out by hand."""
    from transformerop.decode.persistent import phase_times
    names = ["attn", "mlp", "attn", "mlp", "head", "sample"]

    def buf(steps, work, qkv):  # µs -> the kernel's int64 ns: stamps at each barrier, (program, phase) sums,
        stamps = torch.tensor([0, *itertools.accumulate(x for step in steps for x in step)])  # programs' qkv sums
        return torch.cat([stamps, torch.tensor(work).flatten(), torch.tensor(qkv)]) * 1000

    bufs = [buf([[10, 5, 12, 6, 2, 1], [20, 5, 12, 6, 2, 1]], [[16, 8, 18, 10, 2, 2], [18, 6, 20, 8, 2, 1]], [20, 12]),
            buf([[10, 5, 12, 6, 2, 4]], [[8, 4, 9, 5, 1, 1], [9, 3, 10, 4, 1, 3]], [7, 9])]
    per_kind, work, steps, qkv = phase_times(bufs, names, 2)
    assert steps == 3 and qkv == pytest.approx(27 / 3)  # programs' qkv: 27 and 21 us over 3 steps
    assert per_kind == pytest.approx({"attn": 40 / 3 + 12, "mlp": 11, "head": 2, "sample": 2})
    # programs' means over 3 steps: [8, 4, 9, 5, 1, 1] and [9, 3, 10, 4, 1, 4/3]; the busier of each phase
    assert work == pytest.approx({"attn": 9 + 10, "mlp": 4 + 5, "head": 1, "sample": 4 / 3})


def test_the_empty_barrier_kernel_compiles_for_the_h200():
    """The kernel that prices one grid barrier on its own (phase_profile's barrier_us)."""
    from kernels import triton_persistent as k
    compile_for_h200(k._barrier_run_kernel, {"BAR": "*i32", "PROF": "*i64", "n": "i32"}, {}, {"num_warps": 8})


@pytest.mark.gpu
@pytest.mark.parametrize("n_embd,n_layer,n_head,dtype,batch,proj", [
    (384, 6, 6, torch.float32, 1, "row"), (384, 6, 6, torch.bfloat16, 8, "row"), (768, 4, 12, torch.bfloat16, 4, "row"),
    (768, 4, 12, torch.float32, 3, "row"), (768, 4, 12, torch.bfloat16, 8, "head"), (384, 6, 6, torch.float32, 2, "head"),
    (1152, 2, 18, torch.float32, 3, "auto"), (768, 4, 12, torch.bfloat16, 8, "auto"), (384, 6, 6, torch.float32, 3, "split"),
    (1152, 2, 18, torch.bfloat16, 8, "split")])
def test_persistent_on_the_gpu_matches_recompute(n_embd, n_layer, n_head, dtype, batch, proj):
    """The real grid (one program per SM) past block_size: the one parity check (tokens in fp32,
    logits within the precision's tolerance), and in fp32 the same sampled text as decode=static;
    with the projection per row and shared by the rows (decode.attn_proj), and at 1152 wide the
    weight chunks pipelined three deep (STAGES, the plan's choice there in bf16) in fp32, where
    the contract is the same tokens; 768 wide, batch 8, auto: the next phase's weights asked of L2
    (L2_NEXT, by hand); "split": shared, the attention in one run of slots a program (SPLIT_KV, by
    hand) -- at 384 wide, batch 3, 18 items on 132 runs, at 1152 wide, batch 8, 144."""
    from omegaconf import OmegaConf

    from transformerop.decode import Decoder
    from transformerop.decode.parity import parity
    from transformerop.model import build_model
    torch.manual_seed(0)
    cfg = OmegaConf.create({"model": {"name": "gpt", "n_layer": n_layer, "n_head": n_head, "n_embd": n_embd,
                                      "block_size": 64, "dropout": 0.0, "bias": n_embd == 384},
                            "attention": {"name": "sdpa"}})
    m = build_model(cfg, 65).cuda().eval().to(dtype)
    prompt = torch.randint(65, (batch, 7), device="cuda")
    tiles = {"L2_NEXT": True} if (n_embd, proj) == (768, "auto") else {"SPLIT_KV": True} if proj == "split" else {}
    dcfg = OmegaConf.create({"attn_proj": "head" if proj == "split" else proj, "tiles": tiles})
    dec = Decoder(m, "persistent", batch, 7 + 150, temperature=0, dcfg=dcfg)
    assert proj == "auto" or dec.runner.tiles["SHARED_O"] == (proj != "row")
    assert dec.runner.tiles["SPLIT"] == (dec.runner.programs if proj == "split" else 0)
    if n_embd == 1152:
        assert dec.runner.tiles["SHARED_O"]  # auto: batch 3 at 1152 wide saves 10.6 MB of fp32 W_proj reads a layer
        dec.runner.set_tiles({**dec.runner.tiles, "STAGES": 3})
    gate = parity(m, dec, prompt, 150, "float32" if dtype == torch.float32 else "bfloat16")  # raises on a miss
    assert gate["parity_tokens_agree"] == 150 or "parity_near_tie_gap" in gate
    if dtype == torch.float32:
        g = torch.Generator(device="cuda")
        sampled = [Decoder(m, p, batch, 7 + 100, temperature=0.9, top_k=10, dcfg=dcfg)(prompt, g.manual_seed(5)).clone()
                   for p in ("static", "persistent")]
        assert (sampled[0] == sampled[1]).float().mean() > 0.95  # near-ties aside, the same text


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_the_phase_profile_on_the_gpu_adds_up():
    """phase_profile on the real grid (768 wide, batch 1, bf16: qkv tiles of several rounds): each
    kind's busiest program works about as long as the kind's phases last at most (the rest is
    barrier wait), the qkv tiles are a part of the attn phase, and an empty barrier costs less
    than a phase."""
    from omegaconf import OmegaConf

    from transformerop.decode import Decoder
    from transformerop.model import build_model
    torch.manual_seed(0)
    cfg = OmegaConf.create({"model": {"name": "gpt", "n_layer": 2, "n_head": 12, "n_embd": 768, "block_size": 64,
                                      "dropout": 0.0, "bias": False}, "attention": {"name": "sdpa"}})
    m = build_model(cfg, 65).cuda().eval().to(torch.bfloat16)
    dec = Decoder(m, "persistent", 1, 7 + 40, temperature=0)
    p = dec.runner.phase_profile(dec, torch.randint(65, (1, 7), device="cuda"))
    assert p["phases_per_token"] == 2 * 2 + 2 and 0 < p["phase_steps"] <= 40
    for kind in ("attn", "mlp", "head", "sample"):  # programs leave a barrier up to ~1 us apart
        assert 0 < p[f"phase_work_us_{kind}"] <= p[f"phase_us_{kind}"] + 2.0, kind
    assert 0 < p["phase_work_us_attn_qkv"] < p["phase_work_us_attn"]
    assert 0 < p["barrier_us"] < p["phase_us_per_token"] / p["phases_per_token"]


READ_SLOT = """
import json, sys
import torch
import triton
import triton.language as tl
from kernels.triton_decode_stream import _stream

@triton.jit
def read_slot(X, NXT, OUT, NB: tl.constexpr, K: tl.constexpr, B_PAD: tl.constexpr, BK: tl.constexpr,
              REPS: tl.constexpr):
    x = _stream(0, X, NXT, X, 1, NB, K, B_PAD, BK, False, REPS)  # fold on: NXT gets the slot too
    rows = tl.arange(0, B_PAD)
    offs = tl.arange(0, BK)
    tl.store(OUT + rows[:, None] * K + offs[None, :], x, mask=(rows < NB)[:, None] & (offs < K)[None, :])

torch.manual_seed(0)
nb, k, copies = 3, 40, 4
x = torch.randn(copies, nb, k)  # every copy non-zero: a reader that stops short or reads past REPS is off
res = {}
for reps in (1, 4):
    out, nxt = torch.zeros(nb, k), torch.zeros(nb, k)
    read_slot[(1,)](x, nxt, out, nb, k, 4, 64, reps)
    res[reps] = [out.tolist(), nxt.tolist()]
print("RESULT " + json.dumps({"x": x.tolist(), "res": res}))
"""


def test_a_stream_slot_reads_as_the_sum_of_its_copies(tmp_path):
    """The MLP's programs add into a slot's REPS copies by turns; its reader must see their sum
    (and fold that sum into the next slot), and with REPS=1 the first copy alone."""
    r = script_result(READ_SLOT, {"TRITON_INTERPRET": "1"}, folder=tmp_path)
    x = torch.tensor(r["x"], dtype=torch.float64)
    for reps, want in (("1", x[0]), ("4", x.sum(0))):
        out, nxt = (torch.tensor(v, dtype=torch.float64) for v in r["res"][reps])
        assert torch.allclose(out, want, atol=1e-5), reps
        assert torch.allclose(nxt, want, atol=1e-5), reps
