"""decode=fused: the static cache, prefilled by the model itself, then each new token through
kernels/triton_decode.py -- 5 Triton kernels a layer (LayerNorm fused into the matvecs,
attention over the static cache, residual epilogues) and one for the logits -- into fixed
buffers, so on CUDA the whole step is captured in one graph. Its matvec tile is decode.block_n /
decode.block_k (the schema's defaults)."""

import torch

from .base import check_triton_step, model_device
from .static import Static

SAMPLE_KERNELS = 4  # index the noise, add, argmax, write the token and advance


class Fused(Static):
    graphed = True
    gelus = ("erf",)  # its MLP kernel computes the exact GELU

    def __init__(self, model, batch_size, dcfg=None):
        super().__init__(model, batch_size, dcfg)
        from kernels import triton_decode  # Triton loads only when this path is chosen
        self.kern = triton_decode
        if dcfg is None:  # the one default: the schema's
            from omegaconf import OmegaConf

            from ..config import DecodeConfig
            dcfg = OmegaConf.structured(DecodeConfig)
        self.tiles = {"block_n": dcfg.block_n, "block_k": dcfg.block_k}
        C, dt, dev = model.cfg.n_embd, next(model.parameters()).dtype, model_device(model)
        self.x = torch.zeros(batch_size, C, device=dev, dtype=dt)  # the residual stream
        self.x2 = torch.zeros_like(self.x)
        self.qkv = torch.zeros(batch_size, 3 * C, device=dev, dtype=dt)
        self.y = torch.zeros_like(self.x)
        self.h = torch.zeros(batch_size, 4 * C, device=dev, dtype=dt)
        self.logits = torch.zeros(batch_size, model.vocab_size, device=dev, dtype=dt)

    def forward_token(self, token):
        m, k = self.model, self.kern
        if token.size(1) != 1:  # a prefill-sized chunk goes through the model
            return super().forward_token(token)
        torch.add(m.wte(token[:, 0]), m.wpe(self.pos), out=self.x)
        t = self.tiles
        for i, blk in enumerate(m.blocks):
            a, f = blk.attn, blk.mlp
            k.ln_matvec(self.x, a.c_attn.weight, self.qkv, ln=blk.ln_1, bias=a.c_attn.bias, **t)
            k.attn_decode(self.qkv, self.k[i], self.v[i], self.pos, self.y, a.scale)
            k.ln_matvec(self.y, a.c_proj.weight, self.x2, bias=a.c_proj.bias, resid=self.x, **t)
            k.ln_matvec(self.x2, f.c_fc.weight, self.h, ln=blk.ln_2, bias=f.c_fc.bias, gelu=True, **t)
            k.ln_matvec(self.h, f.c_proj.weight, self.x, bias=f.c_proj.bias, resid=self.x2, **t)
        k.ln_matvec(self.x, m.lm_head.weight, self.logits, ln=m.ln_f, **t)
        self.pos += 1
        return self.logits

    @classmethod
    def check(cls, cfg, device) -> None:
        check_triton_step(cfg, device)

    @classmethod
    def kernels_per_token(cls, shape, bf16: bool) -> int:
        return 5 * shape.n_layer + 2 + SAMPLE_KERNELS  # embeddings add + blocks + logits, then sampling
