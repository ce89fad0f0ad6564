"""Generation: prompt prefill, then one token at a time, sampled on the device.

Paths (`decode.name`), all driven by the one loop in `Decoder.__call__`:
  recompute     no cache: every token reruns the whole current window through the model.
  kv_cache      per-layer K/V grown with torch.cat; attention with mask None (bottom-right causal).
  static        per-layer K/V preallocated to block_size; the write position is a device tensor,
                new K/V land by `index_copy_`, attention runs over the whole buffer under a
                validity mask built on the device, so every decode step has one fixed shape.
  static_graph  `static` with one decode step (forward + sampling + bookkeeping) captured in a
                torch.cuda.CUDAGraph after warm-up on a side stream; each token is one replay.
  compiled      the same step through torch.compile(mode="reduce-overhead") (CUDA graphs via
                Inductor on GPU; plain Inductor code on CPU).
The loop never reads a device value on the host: the token counter, the cache position and the
sampled tokens stay on the device, and every branch depends only on host-known lengths.

Sampling (Gumbel-max): token = argmax(logits / temperature + g), g = -log(E), E ~ Exp(1), with
logits outside the top k set to -inf first. This draws from softmax(logits / temperature) like
torch.multinomial, but the noise for every column is drawn up front from the caller's generator,
so a captured graph consumes pre-drawn noise (no RNG inside the graph), the same seed gives the
same text, and in fp32 every path gives the same tokens for the same seed. temperature 0 = greedy.

Beyond block_size (W): the model conditions on a window out[:, start:t] of at most W tokens.
A prompt longer than W starts with its last W tokens. When the next token would make the window
longer than W (the cache is full), the window restarts on the last `keep` tokens (default W // 2),
which are re-prefilled at positions 0..keep-1; decoding then continues from there. Every path,
recompute included, follows this rule, so in fp32 greedy they agree token for token at any length
(a recompute that slides by one token each step would condition on a different context and could
not be matched by a cache). Re-prefill runs eagerly (also on the graph paths): one forward of
`keep` tokens every W - keep tokens.

Bigram models have no blocks and ignore caches and positions: every path is correct for them
(their next token depends on the last token only), so all five paths are allowed.
"""
import os
import time

import torch

from .graphs import capture

PATHS = ("recompute", "kv_cache", "static", "static_graph", "compiled", "fused")
MASKED_PATHS = ("static", "static_graph", "compiled", "fused")  # attend under an explicit validity mask (prefill)
GRAPHED = ("static_graph", "fused")  # one decode step captured in a CUDA graph when on CUDA
WARMUP_STEPS = 3


def check(cfg, device) -> None:
    """Raise ValueError for a decode/attention combination that cannot work, BackendUnavailable for
    one that cannot run on this machine; before any work is done."""
    from .model import BackendUnavailable, get_backend

    path = cfg.decode.name
    if path not in PATHS:
        raise ValueError(f"decode.name={path!r}: choose one of {list(PATHS)}")
    if path == "static_graph" and torch.device(device).type != "cuda":
        raise BackendUnavailable("decode=static_graph needs CUDA (CUDA graphs); use decode=static or compiled here")
    if path == "fused":
        if torch.device(device).type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
            raise BackendUnavailable("decode=fused needs CUDA for its Triton kernels (or TRITON_INTERPRET=1, slowly)")
        if cfg.model.name != "gpt":
            raise ValueError(f"decode=fused fuses GPT blocks; model={cfg.model.name} has none: use decode=static")
        d = cfg.decode
        if not all(v >= lo and v & (v - 1) == 0 for v, lo in ((d.block_n, 1), (d.block_k, 16))):
            raise ValueError(f"decode.block_n={d.block_n} and decode.block_k={d.block_k} must be powers of two "
                             "(block_n >= 1, block_k >= 16)")
    if cfg.model.name == "bigram" or path == "recompute":
        return
    backend = get_backend(cfg.attention.name)
    if not getattr(backend, "supports_cache", False):
        raise ValueError(f"attention={cfg.attention.name} cannot attend against a KV cache (decode={path}): "
                         "use decode=recompute, or attention=naive|sdpa")
    if path in MASKED_PATHS and not getattr(backend, "accepts_mask", True):
        raise ValueError(f"decode={path} attends over a preallocated cache under an explicit mask, which "
                         f"attention={cfg.attention.name} refuses: use decode=kv_cache, or attention=sdpa|naive")


# -- sampling -----------------------------------------------------------------------------------
def gumbel_noise(shape, device, generator=None) -> torch.Tensor:
    return torch.empty(shape, device=device).exponential_(generator=generator).log_().neg_()


def sample_next(logits, temperature: float, top_k=None, generator=None, noise=None):
    """logits (B, V) -> (B, 1) token ids. temperature 0 = greedy; otherwise Gumbel-max with `noise`
    (B, V) if given, else noise drawn from `generator`."""
    if temperature == 0:
        return logits.argmax(-1, keepdim=True)
    logits = logits.float() / temperature
    if top_k:
        kth = torch.topk(logits, min(top_k, logits.size(-1)), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if noise is None:
        noise = gumbel_noise(logits.shape, logits.device, generator)
    return (logits + noise).argmax(-1, keepdim=True)


# -- caches: what a layer's attention sees through `cache.update(k, v) -> (k, v, mask)` ---------
class DynamicKVCache:
    """All keys so far, grown by concatenation; mask None = the queries are the last keys."""

    def __init__(self):
        self.k = self.v = None

    def update(self, k, v):
        self.k = k if self.k is None else torch.cat([self.k, k], dim=2)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=2)
        return self.k, self.v, None


class StaticKVCache:
    """One layer's view of preallocated (B, H, W, D) buffers for one forward: the new K/V are
    written at slots `index` (their absolute positions), attention reads the whole buffer."""

    def __init__(self, k, v, index, mask):
        self.k, self.v, self.index, self.mask = k, v, index, mask

    def update(self, k, v):
        # the cache keeps the weights' dtype; under autocast (bench, fp32 weights) k/v arrive bf16
        self.k.index_copy_(2, self.index, k.to(self.k.dtype))
        self.v.index_copy_(2, self.index, v.to(self.v.dtype))
        return self.k, self.v, self.mask


# -- runners: prefill a window, then feed one token at a time; each returns last logits (B, V) -
class Recompute:
    def __init__(self, model, batch_size):
        self.model = model

    def prefill(self, window):
        self.window = window
        return self.model(window)[0][:, -1]

    def forward_token(self, token):
        return self.prefill(torch.cat([self.window, token], dim=1))

    def rewind(self):
        pass


class DynamicRunner:
    """Caches that know their own length; `pos` (a device tensor) feeds the position embedding."""

    def __init__(self, model, batch_size):
        self.model = model
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


class StaticRunner(DynamicRunner):
    def __init__(self, model, batch_size):
        super().__init__(model, batch_size)
        W, device, dtype = model.block_size, model_device(model), next(model.parameters()).dtype
        shapes = [(batch_size, b.attn.n_head, W, b.attn.head_dim) for b in model.blocks]
        # zeros, not empty: masked slots are multiplied by probability 0, and 0 * NaN would be NaN
        self.k = [torch.zeros(s, device=device, dtype=dtype) for s in shapes]
        self.v = [torch.zeros(s, device=device, dtype=dtype) for s in shapes]
        self.slots = torch.arange(W, device=device)

    def rewind(self):
        self.pos.zero_()  # stale slots beyond pos are masked, so nothing needs clearing

    def layer_caches(self, t_new):
        index = self.pos + torch.arange(t_new, device=self.pos.device)  # slots of the new tokens
        mask = self.slots <= index[:, None]  # (Tq, W): a query sees its own slot and those before
        return [StaticKVCache(k, v, index, mask) for k, v in zip(self.k, self.v)]

    def state(self):
        return [self.pos, self.slots, *self.k, *self.v]


class FusedRunner(StaticRunner):
    """decode=fused: the static cache, prefilled by the model itself, then each new token through
    kernels/triton_decode.py (5 kernels a layer) into fixed buffers a CUDA graph can replay."""

    def __init__(self, model, batch_size, tiles=None):
        super().__init__(model, batch_size)
        from kernels import triton_decode  # Triton loads only when this path is chosen
        self.kern = triton_decode
        from .config import DecodeConfig
        block_n, block_k = tiles or (DecodeConfig.block_n, DecodeConfig.block_k)  # one default: the schema's
        self.tiles = {"block_n": block_n, "block_k": block_k}  # matvec tile (decode.block_n / block_k)
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


RUNNERS = {"recompute": Recompute, "kv_cache": DynamicRunner, "static": StaticRunner,
           "static_graph": StaticRunner, "compiled": StaticRunner, "fused": FusedRunner}


def model_device(model):
    return next(model.parameters()).device


class Decoder:
    """Buffers for one (model, path, batch size, total length); call it to generate into them.

    Built once so that graph capture / compilation (`setup_s`) stays outside any timed region;
    each call reuses the same buffers, as a captured graph requires."""

    def __init__(self, model, path: str, batch_size: int, total_len: int, temperature: float = 1.0,
                 top_k=None, keep=None, tiles=None):
        if path not in PATHS:
            raise ValueError(f"decode={path!r}: choose one of {list(PATHS)}")
        device = model_device(model)
        self.model, self.path, self.B, self.total = model, path, batch_size, total_len
        self.temperature, self.top_k = temperature, top_k
        self.W = model.block_size
        self.keep = keep or max(1, self.W // 2)
        if not 1 <= self.keep <= self.W:
            raise ValueError(f"keep={self.keep} must be in [1, block_size={self.W}]")
        self.out = torch.zeros(batch_size, total_len, dtype=torch.long, device=device)
        self.t = torch.zeros((), dtype=torch.long, device=device)  # column of out being produced
        self.noise = (torch.zeros(total_len, batch_size, model.vocab_size, device=device)
                      if temperature > 0 else None)  # one (B, V) row of Gumbel noise per column
        self.runner = RUNNERS[path](model, batch_size, **({"tiles": tiles} if path == "fused" else {}))
        self.step = self._step
        self.setup_s = 0.0
        start = time.perf_counter()
        with torch.no_grad():  # as in __call__: a grad-mode change would recompile / re-capture
            if path in GRAPHED and device.type == "cuda":
                self._capture()
            elif path == "compiled":
                self._compile()
        if path in GRAPHED or path == "compiled":
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            self.setup_s = time.perf_counter() - start

    # one decode step: the unit that is captured or compiled -------------------------------------
    def _step(self):
        """Feed out[:, t-1] through the cache, sample out[:, t], advance t. Returns the logits."""
        logits = self.runner.forward_token(self.out.index_select(1, (self.t - 1).view(1)))
        self._emit(logits)
        return logits

    def _emit(self, logits):
        noise = None if self.noise is None else self.noise.index_select(0, self.t.view(1))[0]
        token = sample_next(logits, self.temperature, self.top_k, noise=noise)
        self.out.index_copy_(1, self.t.view(1), token)
        self.t += 1

    def _rewind(self):
        """A harmless state for warm-up steps: window of one token at column 0, empty cache."""
        self.t.fill_(1)
        self.runner.rewind()

    def _warm_up(self):
        for _ in range(WARMUP_STEPS):
            self._rewind()
            self.step()
        self._rewind()

    def _capture(self):
        def warm():
            self._rewind()
            self.step()
        captured = capture(self._step, warmup=WARMUP_STEPS, reset=self._rewind, warm=warm)
        self.graph, self.step = captured.graph, captured.replay  # logits live in the graph's pool

    def _compile(self):
        # fixed addresses let the CUDA graphs of reduce-overhead mutate these buffers in place
        for t in [self.out, self.t, *self.runner.state()] + ([self.noise] if self.noise is not None else []):
            torch._dynamo.mark_static_address(t)
        self.step = torch.compile(self._step, mode="reduce-overhead")
        self._warm_up()  # compiles, then records the graph

    # the loop -----------------------------------------------------------------------------------
    @torch.no_grad()
    def __call__(self, idx, generator=None, n=None, on_logits=None):
        """Generate after idx (B, T0): n tokens (default all, up to total_len). Returns a view of
        the output buffer (overwritten by the next call). on_logits(i, logits) sees each step's
        logits (B, V) before the next step runs (clone to keep them)."""
        B, T0 = idx.shape
        n = self.total - T0 if n is None else n
        if B != self.B or not 1 <= n <= self.total - T0:
            raise ValueError(f"prompt {tuple(idx.shape)} with {n} new tokens does not fit a decoder built for "
                             f"batch {self.B} and {self.total} columns")
        self.out[:, :T0].copy_(idx)
        if self.noise is not None:
            self.noise.exponential_(generator=generator).log_().neg_()
        self.t.fill_(T0)
        start = max(0, T0 - self.W)  # the window the next token conditions on is out[:, start:t]
        logits = self.runner.prefill(self.out[:, start:T0])
        self._emit(logits)
        for i, t in enumerate(range(T0 + 1, T0 + n)):
            if on_logits is not None:
                on_logits(i, logits)
            if t - start > self.W:  # the cache is full: restart the window on the last `keep` tokens
                start = t - self.keep
                logits = self.runner.prefill(self.out[:, start:t])
                self._emit(logits)
            else:
                logits = self.step()
        if on_logits is not None:
            on_logits(n - 1, logits)
        return self.out[:, :T0 + n]


@torch.no_grad()
def generate(model, idx, max_new_tokens: int, temperature: float = 1.0, top_k=None, path: str = "recompute",
             generator=None, keep=None, tiles=None):
    """Append max_new_tokens to idx (B, T0) along `path`; see the module docstring for the window rule.
    tiles: decode=fused's (decode.block_n, decode.block_k), None = the config defaults."""
    was_training = model.training
    model.eval()
    try:
        dec = Decoder(model, path, idx.size(0), idx.size(1) + max_new_tokens, temperature, top_k, keep, tiles)
        return dec(idx, generator).clone()
    finally:
        model.train(was_training)
