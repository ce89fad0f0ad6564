"""The GPT's weights restacked once for the one-launch decode paths (decode/persistent.py,
decode/megakernel.py), which walk the layers by offset: every per-layer matrix and vector as one
(L, ...) tensor, the qkv rows head-major (head h's q, k and v together: the head's attention waits
on those rows alone), W_proj2 transposed (a hidden unit a row). A vector the model lacks
(bias=false) is None; each path puts in what its kernel expects there."""
import torch


def restack(model) -> dict:
    cfg, blocks = model.cfg, model.blocks
    C, H = cfg.n_embd, cfg.n_head
    D = C // H
    head_major = torch.arange(3 * C, device=model.wte.weight.device).view(3, H, D).transpose(0, 1).reshape(-1)

    def stack(get):
        if get(blocks[0]) is None:
            return None
        return torch.stack([get(b).detach() for b in blocks]).contiguous()

    def qkv_bias(b):
        return None if b.attn.c_attn.bias is None else b.attn.c_attn.bias[head_major]

    return {
        "W_QKV": stack(lambda b: b.attn.c_attn.weight[head_major]), "W_O": stack(lambda b: b.attn.c_proj.weight),
        "W_FC": stack(lambda b: b.mlp.c_fc.weight), "W_P2T": stack(lambda b: b.mlp.c_proj.weight.t()),
        "LN1_W": stack(lambda b: b.ln_1.weight), "LN2_W": stack(lambda b: b.ln_2.weight),
        "B_QKV": stack(qkv_bias), "B_O": stack(lambda b: b.attn.c_proj.bias), "B_FC": stack(lambda b: b.mlp.c_fc.bias),
        "B_P2": stack(lambda b: b.mlp.c_proj.bias), "LN1_B": stack(lambda b: b.ln_1.bias),
        "LN2_B": stack(lambda b: b.ln_2.bias),
        "WTE": model.wte.weight.detach(), "WPE": model.wpe.weight.detach(), "LNF_W": model.ln_f.weight.detach(),
        "LNF_B": None if model.ln_f.bias is None else model.ln_f.bias.detach(),
    }


def pack_chunks(w: torch.Tensor, bn: int, bk: int) -> torch.Tensor:
    """(..., N, K) stored chunk by chunk, in the same shape: each tile of bn rows keeps its place,
    but within it every (bn, bk) chunk is one contiguous run, the chunks in order along K
    (kernels/triton_decode_phases.py's _block, PACKED). Needs N % bn == 0 and K % bk == 0."""
    *lead, N, K = w.shape
    return w.reshape(*lead, N // bn, bn, K // bk, bk).transpose(-3, -2).contiguous().reshape(w.shape)


def unpack_chunks(w: torch.Tensor, bn: int, bk: int) -> torch.Tensor:
    """pack_chunks undone: the row-major (..., N, K) weights back."""
    *lead, N, K = w.shape
    return w.reshape(*lead, N // bn, K // bk, bn, bk).transpose(-3, -2).contiguous().reshape(w.shape)
