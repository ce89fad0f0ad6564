"""decode=kv_cache: per-layer K/V grown with torch.cat; attention with mask None (the queries are
the last keys: bottom-right causal)."""
import torch

from .base import DecodePath, model_device


class DynamicKVCache:
    """All keys so far, grown by concatenation; mask None = the queries are the last keys."""

    def __init__(self):
        self.k = self.v = None

    def update(self, k, v):
        self.k = k if self.k is None else torch.cat([self.k, k], dim=2)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=2)
        return self.k, self.v, None


class KVCache(DecodePath):
    """Caches that know their own length; `pos` (a device tensor) feeds the position embedding."""

    def __init__(self, model, batch_size, dcfg=None):
        super().__init__(model, batch_size, dcfg)
        self.pos = torch.zeros((), dtype=torch.long, device=model_device(model))
        self.rewind()

    def rewind(self):
        self.pos.zero_()
        self.caches = [DynamicKVCache() for _ in self.model.blocks]

    def prefill(self, window):
        self.rewind()
        return self.forward_token(window)

    def forward_token(self, idx):
        logits, _ = self.model(idx, caches=self.layer_caches(idx.size(1)), pos=self.pos)
        self.pos += idx.size(1)  # in place: the same tensor is read by the next (captured) step
        return logits[:, -1]

    def layer_caches(self, t_new):
        return self.caches
