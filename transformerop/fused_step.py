"""train.fused_step (with train.master_weights): the held weights' clip and AdamW as two Triton
kernels (kernels/triton_adamw.py) over flat buffers, the bf16 copies written by the same kernel.

MasterWeights keeps one fp32 master, gradient and bf16 copy a weight; here the masters, their
gradients, AdamW's two moments and the model's bf16 copies each live in one flat buffer, every
weight's segment padded to the kernels' BLOCK, so one launch steps them all. The pull (bf16
gradients into the fp32 ones) stays a multi-tensor copy. The other parameters (embeddings,
LayerNorms: ~1% of the seed's) keep torch's fused AdamW, their gradients scaled by the same clip
coefficient, whose norm covers every gradient as torch.nn.utils.clip_grad_norm_'s does.

AdamW's state for a held weight is views of the flat moments and one shared step count, so
checkpoints keep torch.optim's layout; the optimizer skips those weights (AdamW's `external`)."""
import torch

from .master_weights import MasterWeights


class FlatMasterWeights(MasterWeights):
    def __init__(self, model, dtype: torch.dtype):
        super().__init__(model, dtype)
        from kernels.triton_adamw import BLOCK
        sizes = [m.numel() for m in self.masters]
        padded = [-(-n // BLOCK) * BLOCK for n in sizes]
        dev = self.masters[0].device
        self.flat = {k: torch.zeros(sum(padded), dtype=torch.float32, device=dev) for k in ("p", "g", "m", "v")}
        self.flat16 = torch.zeros(sum(padded), dtype=dtype, device=dev)
        self.step_t = torch.zeros((), dtype=torch.float32, device=dev)  # AdamW's step count, shared
        self.lr_t = torch.zeros((), dtype=torch.float32, device=dev)  # an eager step's lr (a graphed one's is a tensor)
        self.one = torch.ones((), dtype=torch.float32, device=dev)  # the clip coefficient without clipping
        self.moments, decay, start = {}, [], 0
        with torch.no_grad():
            for i, (p, m, n, pad) in enumerate(zip(self.params, self.masters, sizes, padded)):
                def view(buf, shape=m.shape, s=start, n=n):
                    return buf[s:s + n].view(shape)
                view(self.flat["p"]).copy_(m)
                m.data = view(self.flat["p"])
                view(self.flat16).copy_(p)
                p.data = view(self.flat16)
                self.grads[i] = view(self.flat["g"])
                self.moments[m] = {"step": self.step_t, "exp_avg": view(self.flat["m"]),
                                   "exp_avg_sq": view(self.flat["v"])}
                decay += [1.0 if p.dim() >= 2 else 0.0] * (pad // BLOCK)  # weight decay on matrices only
                start += pad
        self.decay = torch.tensor(decay, dtype=torch.float32, device=dev)

    @torch.no_grad()
    def push(self) -> None:
        """The masters into the bf16 copies by the kernels' own rounding (a loaded checkpoint then
        continues exactly as the run that wrote it)."""
        from kernels.triton_adamw import copies
        copies(self.flat["p"], self.flat16)
        self._held = [False] * len(self.params)

    @torch.no_grad()
    def step(self, opt, clip: float, params) -> None:
        """Pull, clip (the norm over every gradient), torch's AdamW for the other parameters, then
        the flat kernel for the held weights. `params`: the model's, in its order."""
        from kernels.triton_adamw import adamw_step, grad_sq_sum
        self.pull()
        missing = [i for i, held in enumerate(self._held) if not held]
        if missing:
            raise RuntimeError(f"train.fused_step steps every held weight at once: {len(missing)} got no gradient "
                               "this step (train.fused_step=false steps only those that did)")
        others = [q for q in params if q not in self.of and q.grad is not None]
        coef = self.one
        if clip > 0:
            sq = grad_sq_sum(self.flat["g"])
            if others:
                sq = sq + torch.stack(torch._foreach_norm([q.grad for q in others])).square().sum()
            coef = (clip / (sq.sqrt() + 1e-6)).clamp(max=1.0)
            if others:
                torch._foreach_mul_([q.grad for q in others], coef)
        opt.step()  # the other parameters: the held weights are its `external` ones
        group = next(g for g in opt.param_groups if any(q.dim() >= 2 and q in self.moments for q in g["params"]))
        lr = group["lr"]
        if not torch.is_tensor(lr):
            self.lr_t.fill_(lr)
            lr = self.lr_t
        self.step_t.add_(1.0)
        beta1, beta2 = group["betas"]
        adamw_step(self.flat["g"], self.flat["p"], self.flat["m"], self.flat["v"], self.flat16, self.decay, lr,
                   self.step_t, coef, beta1, beta2, group["eps"], group["weight_decay"])
        self._held = [False] * len(self.params)
