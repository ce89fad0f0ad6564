"""The seed's starting point: one module per head with its own q/k/v projections, run in a
Python loop. Kept so the "batch the heads" win can be measured against `naive`."""
import math

import torch
import torch.nn as nn

from .base import CausalSelfAttention, causal_mask


class Head(nn.Module):
    def __init__(self, n_embd, head_dim, dropout):
        super().__init__()
        self.query = nn.Linear(n_embd, head_dim, bias=False)
        self.key = nn.Linear(n_embd, head_dim, bias=False)
        self.value = nn.Linear(n_embd, head_dim, bias=False)
        self.dropout = nn.Dropout(dropout)
        self.scale = 1.0 / math.sqrt(head_dim)

    def forward(self, x):
        T = x.size(1)
        att = (self.query(x) @ self.key(x).transpose(-2, -1)) * self.scale
        att = att.masked_fill(~causal_mask(T, T, x.device), float("-inf"))
        return self.dropout(torch.softmax(att, dim=-1)) @ self.value(x)


class NaiveLoopAttention(nn.Module):
    """Not a CausalSelfAttention (it has no attend(): its heads own their projections), but it
    declares the same capabilities, borrowing the defaults it shares."""

    supports_cache = False
    accepts_mask = False
    dtypes = CausalSelfAttention.dtypes
    backward = "autograd"
    fused = False
    skips_masked = False  # the whole T x T product, then the mask
    per_head_projections = True
    check = CausalSelfAttention.check
    precision = CausalSelfAttention.precision
    tolerance = CausalSelfAttention.tolerance
    variants = CausalSelfAttention.variants

    @classmethod
    def kernels_per_layer(cls, n_head, dropout):
        # per head: 3 linears, bmm, *scale, ones, tril, ~mask, masked_fill, softmax, (dropout), bmm; then cat
        return n_head * (11 + int(dropout)) + 1

    def __init__(self, mcfg, acfg):
        super().__init__()
        head_dim = mcfg.n_embd // mcfg.n_head
        self.heads = nn.ModuleList(Head(mcfg.n_embd, head_dim, mcfg.dropout) for _ in range(mcfg.n_head))
        self.c_proj = nn.Linear(mcfg.n_embd, mcfg.n_embd, bias=mcfg.bias)
        self.resid_dropout = nn.Dropout(mcfg.dropout)

    def forward(self, x, cache=None):
        return self.resid_dropout(self.branch(x, cache))

    def branch(self, x, cache=None):
        if cache is not None:
            raise ValueError("attention=naive_loop has no KV-cache path: use a decode path without a cache")
        return self.c_proj(torch.cat([h(x) for h in self.heads], dim=-1))

