"""Materialized scores, heads batched in one matmul: softmax(q k^T / sqrt(d) + causal) v."""
import torch.nn as nn

from .base import CausalSelfAttention, causal_mask
from .softmax import SOFTMAXES, get_softmax


class NaiveAttention(CausalSelfAttention):
    fused = False
    skips_masked = False  # the whole T x T product, then the mask

    def __init__(self, mcfg, acfg):
        super().__init__(mcfg, acfg)
        self.softmax = get_softmax(acfg)
        self.attn_dropout = nn.Dropout(mcfg.dropout)

    @classmethod
    def check(cls, cfg, device):
        super().check(cfg, device)
        get_softmax(cfg.attention).check(device)

    @classmethod
    def kernels_per_layer(cls, n_head, dropout):
        # copy q, copy k, bmm, *scale, ones, tril, ~mask, masked_fill, softmax, (dropout), copy v, bmm
        return 11 + int(dropout)

    @classmethod
    def variants(cls, name):
        return [(f"{name} softmax={sm}", {"name": name, "softmax": sm}) for sm in SOFTMAXES]

    def attend(self, q, k, v, mask):
        att = (q @ k.transpose(-2, -1)) * self.scale  # (B, H, Tq, Tk): the T x T being studied
        if mask is None:
            mask = causal_mask(q.size(-2), k.size(-2), q.device)
        att = att.masked_fill(~mask, float("-inf"))
        att = self.attn_dropout(self.softmax(att))
        return att @ v
