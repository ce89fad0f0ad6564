"""The one loop every decode path runs in, and the window rule past block_size.

The loop never reads a device value on the host: the token counter, the cache position and the
sampled tokens stay on the device, and every branch depends only on host-known lengths. A path
that declares `graphed` has its decode step (forward + sampling + bookkeeping) captured once in a
CUDA graph (graphs.capture) and replayed per token; one that declares `compiled` goes through
torch.compile(mode="reduce-overhead"). Both happen when the Decoder is built, outside any timed
region (setup_s). One that declares `runs` is handed every step up to the window's end in one
call (one launch of a persistent kernel) and keeps each column's logits, which the on_logits hook
then sees after that call.

Beyond block_size (W): the model conditions on a window out[:, start:t] of at most W tokens.
A prompt longer than W starts with its last W tokens. When the next token would make the window
longer than W (the cache is full), the window restarts on the last `keep` tokens (default W // 2),
which are re-prefilled at positions 0..keep-1; decoding then continues from there. Every path,
recompute included, follows this rule, so in fp32 greedy they agree token for token at any length
(a recompute that slides by one token each step would condition on a different context and could
not be matched by a cache). Re-prefill runs eagerly (also on the graph paths): one forward of
`keep` tokens every W - keep tokens.

Bigram models have no blocks and ignore caches and positions: every path is correct for them
(their next token depends on the last token only), so every path is allowed.
"""
import time

import torch

from ..graphs import capture
from ..measure.timing import measure
from ..runtime import sync
from .base import model_device
from .registry import REFERENCE, get_path
from .sampling import sample_next

WARMUP_STEPS = 3


class Decoder:
    """Buffers for one (model, path, batch size, total length); call it to generate into them.

    Built once so that graph capture / compilation (`setup_s`) stays outside any timed region;
    each call reuses the same buffers, as a captured graph requires."""

    def __init__(self, model, path: str, batch_size: int, total_len: int, temperature: float = 1.0,
                 top_k=None, keep=None, dcfg=None):
        cls = get_path(path)
        device = model_device(model)
        self.model, self.path, self.B, self.total = model, path, batch_size, total_len
        self.temperature, self.top_k = temperature, top_k
        self.W = model.block_size
        self.keep = keep or getattr(dcfg, "keep", None) or max(1, self.W // 2)
        if not 1 <= self.keep <= self.W:
            raise ValueError(f"decode.keep={self.keep} must be in [1, block_size={self.W}]")
        self.out = torch.zeros(batch_size, total_len, dtype=torch.long, device=device)
        self.t = torch.zeros((), dtype=torch.long, device=device)  # column of out being produced
        self.noise = (torch.zeros(total_len, batch_size, model.vocab_size, device=device)
                      if temperature > 0 else None)  # one (B, V) row of Gumbel noise per column
        self.runner = cls(model, batch_size, dcfg)
        self.step = self._step
        self.setup_s = 0.0
        start = time.perf_counter()
        graphed = cls.graphed and device.type == "cuda"
        with torch.no_grad():  # as in __call__: a grad-mode change would recompile / re-capture
            if graphed:
                self._capture()
            elif cls.compiled:
                self._compile()
        if graphed or cls.compiled:
            sync(device)
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

    def _warm_step(self):
        self._rewind()
        self.step()

    def _capture(self):
        captured = capture(self._step, warmup=WARMUP_STEPS, reset=self._rewind, warm=self._warm_step)
        self.step = captured.replay  # the logits live in the graph's pool: every replay rewrites them

    def _compile(self):
        # fixed addresses let the CUDA graphs of reduce-overhead mutate these buffers in place
        for t in [self.out, self.t, *self.runner.state()] + ([self.noise] if self.noise is not None else []):
            torch._dynamo.mark_static_address(t)
        self.step = torch.compile(self._step, mode="reduce-overhead")
        for _ in range(WARMUP_STEPS):  # compiles, then records the graph
            self._warm_step()
        self._rewind()

    # the loop -----------------------------------------------------------------------------------
    @torch.no_grad()
    def __call__(self, idx, generator=None, n=None, on_logits=None):
        """Generate after idx (B, T0): n tokens (default all, up to total_len). Returns a view of
        the output buffer (overwritten by the next call). on_logits(i, logits) sees each step's
        logits (B, V) before the next step runs (clone to keep them); on a path that `runs`, after
        the call that ran them (each column's logits are kept until the next call)."""
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
        t, end = T0 + 1, T0 + n  # t: the column the next step produces
        while t < end:
            if on_logits is not None:
                on_logits(t - 1 - T0, logits)
            if t - start > self.W:  # the cache is full: restart the window on the last `keep` tokens
                start = t - self.keep
                logits = self.runner.prefill(self.out[:, start:t])
                self._emit(logits)
                t += 1
            elif self.runner.runs:  # every step to the window's end in one call
                m = min(end, start + self.W + 1) - t
                rows = self.runner.run(self.out, self.t, self.noise, self.temperature, self.top_k, m)
                if on_logits is not None:
                    for col in range(t, t + m - 1):  # kept per column: the hook sees them after the launch
                        on_logits(col - T0, rows[col])
                logits = rows[t + m - 1]
                t += m
            else:
                logits = self.step()
                t += 1
        if on_logits is not None:
            on_logits(n - 1, logits)
        return self.out[:, :T0 + n]


@torch.no_grad()
def generate(model, idx, max_new_tokens: int, temperature: float = 1.0, top_k=None, path: str | None = None,
             generator=None, keep=None, dcfg=None):
    """Append max_new_tokens to idx (B, T0) along `path` (default: the reference path); see the
    module docstring for the window rule."""
    path = path or REFERENCE
    was_training = model.training
    model.eval()
    try:
        dec = Decoder(model, path, idx.size(0), idx.size(1) + max_new_tokens, temperature, top_k, keep, dcfg)
        return dec(idx, generator).clone()
    finally:
        model.train(was_training)


def timed_generation(dec, prompt, seeded, device, warmup_ms=None, rep_ms=None, repeats: int = 5):
    """The one timed generation (task=generate and bench.target=generate): the Decoder is built --
    captured or compiled -- before this. One untimed full run (it also meets every window length,
    so eager per-shape set-up lands here, and gives the text), one more to size the repeats, then
    measure() the whole generation. seeded() -> a fresh generator with the run's seed.
    Returns (timing stats, the first run's tokens)."""
    out = dec(prompt, seeded()).clone()
    sync(device)
    start = time.perf_counter()
    dec(prompt, seeded())
    sync(device)
    once_ms = (time.perf_counter() - start) * 1e3
    gen = seeded()
    stats = measure(lambda: dec(prompt, gen), device, warmup_ms=warmup_ms if warmup_ms is not None else once_ms,
                    rep_ms=rep_ms if rep_ms is not None else once_ms * (repeats + 0.5), min_repeats=repeats)
    return stats, out
