"""decode=megakernel: every decode step up to the window's end in one launch of a CUDA kernel
(kernels/megakernel.cu) -- one CTA per SM, bulk copies streaming the CTA's weights into shared
memory ahead of its threads, which wait only on the activations (counters and grid barriers),
sampling on the device from the loop's pre-drawn Gumbel noise. The prompt, and the re-prefill
when the window restarts, go through the model itself into the same static cache
(decode/static.py). The schedule and the weight streams come from the shape
(decode/megakernel_plan.py); the streams are one more copy of the weights, packed when the path
is built."""
import torch

from ..errors import BackendUnavailable
from . import megakernel_plan as mp
from .restack import restack
from .static import Static

BARRIERS_TIMED = 1000  # empty grid barriers run back to back to price one
LAYER_PHASES = ("attn", "mlp")
TOKEN_PHASES = ("head",)  # the head tiles, the sampling and the next token's embedding


def kernel_weights(model) -> dict:
    """decode/restack.py's matrices and vectors as this kernel reads them: W_o also as each head's
    columns (H x C rows of D, the fused projection's blocks); a vector the model lacks, an empty
    tensor (a null pointer to the kernel)."""
    w = restack(model)
    C, H = model.cfg.n_embd, model.cfg.n_head
    w["W_O_HEADS"] = w["W_O"].view(-1, C, H, C // H).transpose(1, 2).reshape(-1, H * C, C // H).contiguous()
    empty = torch.empty(0, device=w["WTE"].device, dtype=w["WTE"].dtype)
    return {k: empty if v is None else v.contiguous() for k, v in w.items()}


class Megakernel(Static):
    runs = True  # the loop hands it every step up to the window's end: one launch
    gelus = ("erf",)  # its MLP phase computes the exact GELU
    max_vocab = mp.MAX_ROW  # a row of logits in shared memory
    smem_limit = None  # bytes of shared memory a CTA may take (None: the device's); tests lower it to stream
    fused = None  # the projection in the attention items (None: the plan's rule, at batch 1)

    def __init__(self, model, batch_size, dcfg=None):
        super().__init__(model, batch_size, dcfg)
        from kernels import megakernel  # the extension builds (or loads) only when this path is chosen
        self.ext = megakernel.load()
        cfg, dev = model.cfg, model.wte.weight.device
        self.dtype = model.wte.weight.dtype
        C, H, L, V, W = cfg.n_embd, cfg.n_head, cfg.n_layer, model.vocab_size, model.block_size
        self.grid = torch.cuda.get_device_properties(dev).multi_processor_count
        self.plan = mp.plan(C, H, L, V, W, batch_size, self.grid, self.dtype.itemsize,
                            self.smem_limit or megakernel.shared_memory_limit(dev), self.fused)
        self.stack_caches()
        w = kernel_weights(model)
        self.packed = mp.pack(self.plan, w)
        # the matrices now live in the packed streams; the kernel reads only these directly
        self.w = {k: v for k, v in w.items() if not k.startswith("W_")}
        self.schedule = mp.tensors(self.plan, dev)
        p, D, B = self.plan, C // H, batch_size

        def scratch(*shape, dtype=torch.float32):
            return torch.zeros(*shape, device=dev, dtype=dtype)

        # the attention shares: D + 4 floats each (kernels/megakernel_phases.cuh: share_floats)
        self.qkv, self.part = scratch(B, 3 * C), scratch(B * H * p.splits * (D + 4))
        self.x = scratch(2, 2 * L + 1, p.reps, B, C)  # a set of slots per step parity, each in reps copies
        self.sync = scratch(sync_ints(L, H), dtype=torch.int32)
        self.none = torch.empty(0, device=dev)
        self.logits = None  # (total, B, V) fp32, a row of logits per output column; sized on the first run
        self.eps, self.scale = model.ln_f.eps, model.blocks[0].attn.scale
        self.stamps = None  # a list while phase_profile runs

    def run(self, out, t, noise, temperature: float, top_k, n: int):
        """n decode steps in one launch (decode/persistent.py's contract): feeds out[:, t - 1],
        samples out[:, t], advances t and the position, n times. Returns the (total, B, V) logits
        by output column (a buffer the next run overwrites)."""
        total = out.size(1)
        if self.logits is None or self.logits.size(0) != total:
            self.logits = torch.zeros(total, self.batch_size, self.plan.V, device=out.device)
        p, greedy = self.plan, temperature == 0
        prof = self.none
        if self.stamps is not None:
            prof = torch.zeros(n * (2 * p.L + 1) + 1, device=out.device, dtype=torch.int64)
            self.stamps.append(prof)
        self.sync.zero_()
        self.x.zero_()
        w, s = self.w, self.schedule
        tensors = [s["cta"], s["blocks"], s["tiles"], self.packed, w["WTE"], w["WPE"], w["LN1_W"], w["LN1_B"],
                   w["LN2_W"], w["LN2_B"], w["LNF_W"], w["LNF_B"], w["B_QKV"], w["B_O"], w["B_FC"], w["B_P2"],
                   self.kc, self.vc, self.qkv, self.part, self.x, self.logits,
                   noise if noise is not None and not greedy else self.none, out, t, self.pos, self.sync, prof]
        ints = [n, self.batch_size, p.C, p.H, p.L, p.V, p.W, total, p.splits, p.split_len, p.tq, p.n_att,
                p.n_head_tiles, p.rf, p.scratch, p.ring, int(top_k or 0), int(greedy), p.nb, p.grid, p.smem,
                p.bias_rows, int(p.fused), p.reps]
        self.ext.run(tensors, ints, [self.eps, self.scale, 1.0 if greedy else float(temperature)])
        return self.logits

    def error(self) -> int:
        """The kernel's error code (a wait that timed out), 0 if none: reads the device."""
        return int(self.sync[2].item())

    def phase_profile(self, dec, prompt) -> dict:
        """One generation with every grid barrier time-stamped (CTA 0 reads the globaltimer as it
        leaves each): µs per decode step in each kind of phase (attn: the qkv tiles, the attention
        items and the projection; mlp; head: the logits, the sampling and the next embedding) and
        its share, and barrier_us: the mean of an empty grid barrier on the same grid."""
        L = self.plan.L
        names = [*LAYER_PHASES * L, *TOKEN_PHASES]
        self.stamps = []
        try:
            dec(prompt)
        finally:
            stamps, self.stamps = self.stamps, None
        if not stamps:
            return {}
        per_kind = {}
        d = torch.cat([torch.diff(s.double()).view(-1, len(names)) for s in stamps])  # (steps, phases) ns
        for j, name in enumerate(names):
            per_kind[name] = per_kind.get(name, 0.0) + d[:, j].mean().item() / 1e3
        total = sum(per_kind.values())
        empty = torch.zeros(BARRIERS_TIMED, device=self.sync.device, dtype=torch.int64)
        self.sync.zero_()
        self.ext.barriers(self.sync, empty, BARRIERS_TIMED, self.grid)
        barrier_us = (empty[-1] - empty[0]).item() / (BARRIERS_TIMED - 1) / 1e3
        return {**{f"phase_us_{k}": v for k, v in per_kind.items()}, "barrier_us": barrier_us,
                **{f"phase_share_{k}": v / total for k, v in per_kind.items()},
                "phases_per_token": len(names), "phase_us_per_token": total, "phase_steps": d.size(0),
                "weights_resident": self.plan.resident_share, "fused_proj": int(self.plan.fused)}

    @classmethod
    def check(cls, cfg, device) -> None:
        name = cfg.decode.name
        if cfg.model.name != "gpt":
            raise ValueError(f"decode={name} runs GPT blocks in its kernel; model={cfg.model.name} has none: use a "
                             "path that runs the model itself")
        m = cfg.model
        error = mp.shape_error(m.n_embd, m.n_head, 65, m.block_size, cfg.generate.batch_size)
        if error:
            raise ValueError(error)
        if torch.device(device).type != "cuda":
            raise BackendUnavailable(f"decode={name} needs a CUDA GPU for its kernel (the run's device is {device})")
        from kernels import megakernel
        megakernel.require(f"decode={name}", device)

    @classmethod
    def kernels_per_token(cls, shape, bf16: bool) -> int:
        """Grid barriers per token: each costs about what a graph node does, so the launch term
        prices them at graph_node_us."""
        return len(LAYER_PHASES) * shape.n_layer + len(TOKEN_PHASES)

    @classmethod
    def launch_key(cls, device) -> str:
        return "graph_node_us" if torch.device(device).type == "cuda" else "op_infer_us"


def sync_ints(L: int, H: int) -> int:
    """Params::sync's ints: the barrier, the head tiles' count, the error, then L * H + L counts."""
    return 3 + L * H + L
