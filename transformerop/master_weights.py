"""train.master_weights: every Linear's weight (and bias) held as the model's parameter in the
autocast dtype (bf16), its fp32 master in the optimizer.

Under autocast each Linear casts its fp32 weight to bf16 on every forward, and the backward casts
the bf16 weight gradient back to fp32: two kernels a weight a step (48 at the seed size, ~160 µs
of a 4.7 ms graphed step on the H200), and a CUDA-graphed step cannot keep autocast's cast cache.
Here those casts become two multi-tensor copies a step: the bf16 gradients into the masters' fp32
gradients before the clip (pull), and the updated masters into the bf16 weights after AdamW
(push). The arithmetic is autocast's: the forward reads the same rounded weights, the matmul's
gradient is bf16 either way, and the clip, AdamW and the accumulation of micro-batches run on the
same fp32 values -- so a run with it matches a run without it to the last bit.

Embeddings (and the head tied to wte) and LayerNorms keep fp32 parameters: the embedding's lookup
starts the fp32 residual stream, and autocast runs LayerNorm in fp32."""
import contextlib

import torch
import torch.nn as nn


class MasterWeights:
    def __init__(self, model: nn.Module, dtype: torch.dtype):
        embedded = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
        self.params = []  # the model's parameters this holds masters for, in the model's order
        seen = set(embedded)
        for m in model.modules():
            if isinstance(m, nn.Linear):
                for p in (m.weight, m.bias):
                    if p is not None and p.requires_grad and id(p) not in seen:
                        seen.add(id(p))
                        self.params.append(p)
        self.masters = [nn.Parameter(p.detach().float().clone()) for p in self.params]
        self.grads = [torch.zeros_like(m) for m in self.masters]  # the masters' gradients, reused every step
        self._held = [False] * len(self.params)  # whose gradient this step's pulls have written
        self.of = {p: m for p, m in zip(self.params, self.masters)}
        self.moments = {}  # AdamW state of masters stepped outside the optimizer (train.fused_step's); none here
        with torch.no_grad():
            for p in self.params:
                p.data = p.data.to(dtype)

    def substituted(self, params) -> list:
        """`params` with each parameter this holds a master for replaced by its master."""
        return [self.of.get(p, p) for p in params]

    @torch.no_grad()
    def pull(self) -> None:
        """The model's bf16 gradients into the masters' (copied on a step's first pull, added on
        later ones: micro-batches accumulate in fp32), then dropped. A master whose weight got no
        gradient this step has none either, so AdamW skips it as it would the weight."""
        first, later = [], []
        for i, p in enumerate(self.params):
            if p.grad is not None:
                (later if self._held[i] else first).append(i)
        if first:
            torch._foreach_copy_([self.grads[i] for i in first], [self.params[i].grad for i in first])
        if later:
            torch._foreach_add_([self.grads[i] for i in later], [self.params[i].grad for i in later])
        for i in first + later:
            self._held[i] = True
            self.params[i].grad = None
        for i, m in enumerate(self.masters):
            m.grad = self.grads[i] if self._held[i] else None

    def step(self, opt, clip: float, params) -> None:
        """One optimizer step: the gradients pulled, clipped on the masters (listed in the model's
        parameter order `params`, as torch.nn.utils.clip_grad_norm_ sees them without masters),
        AdamW, and the masters pushed into the bf16 weights."""
        self.pull()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(self.substituted(params), clip)
        opt.step()
        self.push()

    @torch.no_grad()
    def push(self) -> None:
        """The masters, after the optimizer's step, rounded into the model's weights; the next step's
        pulls start over."""
        torch._foreach_copy_(self.params, self.masters)
        self._held = [False] * len(self.params)

    # -- checkpoints and what follows training: fp32 weights -------------------------------------
    def state_dict(self, model: nn.Module) -> dict:
        """model.state_dict() with the masters in place of their bf16 copies."""
        names = {id(p): n for n, p in model.named_parameters()}
        sd = model.state_dict()
        for p, m in self.of.items():
            sd[names[id(p)]] = m.detach()
        return sd

    @torch.no_grad()
    def load(self, model: nn.Module, sd: dict) -> None:
        """Masters from a state dict's fp32 values (a checkpoint keeps them), then the weights from them."""
        for n, p in model.named_parameters():
            if p in self.of and n in sd:
                self.of[p].copy_(sd[n])
        self.push()

    @torch.no_grad()
    def release(self) -> None:
        """The masters become the model's parameters for good (training is over: what follows
        decodes or samples from fp32 weights); nothing is held any more."""
        for p, m in zip(self.params, self.masters):
            p.data = m.data
        self.params, self.masters, self.grads, self._held, self.of = [], [], [], [], {}

    @contextlib.contextmanager
    def full_precision(self):
        """The model's Linear parameters are the fp32 masters while inside (decoding and sampling
        after training read fp32 weights, as without the masters); the bf16 copies come back after,
        the same storage a captured step reads."""
        kept = [p.data for p in self.params]
        for p, m in zip(self.params, self.masters):
            p.data = m.data
        try:
            yield
        finally:
            for p, d in zip(self.params, kept):
                p.data = d
