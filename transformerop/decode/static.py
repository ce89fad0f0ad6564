"""decode=static: per-layer K/V preallocated to block_size; the write position is a device
tensor, new K/V land by `index_copy_`, attention runs over the whole buffer under a validity
mask built on the device, so every decode step has one fixed shape (what a CUDA graph or
torch.compile needs)."""
import torch

from .base import model_device
from .kv_cache import KVCache


class StaticKVCache:
    """One layer's view of preallocated (B, H, W, D) buffers for one forward: the new K/V are
    written at slots `index` (their absolute positions), attention reads the whole buffer."""

    def __init__(self, k, v, index, mask):
        self.k, self.v, self.index, self.mask = k, v, index, mask

    def update(self, k, v):
        # the cache keeps the weights' dtype; k/v may arrive in autocast's
        self.k.index_copy_(2, self.index, k.to(self.k.dtype))
        self.v.index_copy_(2, self.index, v.to(self.v.dtype))
        return self.k, self.v, self.mask


class Static(KVCache):
    masked = True

    def __init__(self, model, batch_size, dcfg=None):
        super().__init__(model, batch_size, dcfg)
        W, device, dtype = model.block_size, model_device(model), next(model.parameters()).dtype
        shapes = [(batch_size, b.attn.n_head, W, b.attn.head_dim) for b in model.blocks]
        # zeros, not empty: masked slots are multiplied by probability 0, and 0 * NaN would be NaN
        self.k = [torch.zeros(s, device=device, dtype=dtype) for s in shapes]
        self.v = [torch.zeros(s, device=device, dtype=dtype) for s in shapes]
        self.slots = torch.arange(W, device=device)

    def stack_caches(self) -> None:
        """One (L, B, H, W, D) buffer per cache, for a kernel that walks the layers by offset; the
        model's prefill writes its per-layer views."""
        self.kc, self.vc = torch.stack(self.k), torch.stack(self.v)
        self.k, self.v = list(self.kc.unbind(0)), list(self.vc.unbind(0))

    def rewind(self):
        self.pos.zero_()  # stale slots beyond pos are masked, so nothing needs clearing

    def layer_caches(self, t_new):
        index = self.pos + torch.arange(t_new, device=self.pos.device)  # slots of the new tokens
        mask = self.slots <= index[:, None]  # (Tq, W): a query sees its own slot and those before
        return [StaticKVCache(k, v, index, mask) for k, v in zip(self.k, self.v)]

    def state(self):
        return [self.pos, self.slots, *self.k, *self.v]
