"""decode=persistent: every decode step up to the window's end in one launch of
kernels/triton_persistent.py -- a grid of one program per SM that stays resident and runs each
step's 2 phases per layer (plus the head and the sample) between grid-wide barriers, sampling on
the device from the loop's pre-drawn Gumbel noise. The prompt, and the re-prefill when the window
restarts, go through the model itself into the same static cache (decode/static.py).

Its weights are restacked once, layer-major, when the path is built (decode/restack.py: one copy
of the model's weights, the kernel walks the layers by offset); the qkv rows head-major, so that one head's q,
k and v are one block of rows, which the head's attention waits on alone."""

import torch

from ..runtime import interpreting
from .base import check_triton_step, model_device
from .persistent_plan import by_hand_error, plan
from .restack import pack_chunks, restack, unpack_chunks
from .static import Static

MAX_VOCAB = 4096  # the sample phase holds a whole row of logits in one program
BARRIERS_TIMED = 1000  # empty grid barriers run back to back to price one


def folded_norms(w: dict, L: int, bias: bool, ln_bias: bool) -> torch.Tensor:
    """The folded LayerNorms' u = W g and c = W beta + b for the product after each LayerNorm, in float64 from
    the weights as the kernel reads them, kept in fp32: a layer's qkv u, c, then W_fc's u, c (14C
    values), and after the layers the head's (2V)."""
    def uc(W, g, beta, b):
        W = W.double()
        c = W @ beta.double() if ln_bias else torch.zeros(W.size(0), dtype=torch.float64, device=W.device)
        return [W @ g.double(), c + b.double() if b is not None else c]

    parts = []
    for i in range(L):  # a layer at a time: W in float64 is 4x its bf16 bytes
        beta1, beta2 = (w["LN1_B"][i], w["LN2_B"][i]) if ln_bias else (None, None)
        parts += uc(w["W_QKV"][i], w["LN1_W"][i], beta1, w["B_QKV"][i] if bias else None)
        parts += uc(w["W_FC"][i], w["LN2_W"][i], beta2, w["B_FC"][i] if bias else None)
    parts += uc(w["WTE"], w["LNF_W"], w["LNF_B"] if ln_bias else None, None)
    return torch.cat(parts).float()


def phase_times(bufs, names, programs: int) -> tuple[dict, dict, int, float]:
    """From profiled launches' buffers (the kernel's PROF: the barriers' globaltimer stamps, then
    each program's ns in each phase of a step, summed over the launch's steps, then each program's
    ns in the attn phases' qkv tiles): µs per step in each kind of phase; per kind the busiest
    program's own µs, phase by phase, summed the same way; the steps seen; and the busiest
    program's µs a step in its qkv tiles."""
    P = len(names)
    split = [b.double().split([b.numel() - programs * (P + 1), programs * P, programs]) for b in bufs]
    d = torch.cat([torch.diff(t).view(-1, P) for t, _, _ in split])  # (steps, phases) ns
    busiest = (sum(w for _, w, _ in split).view(programs, P) / d.size(0)).max(0).values  # (phases,) ns a step
    qkv = (sum(q for _, _, q in split) / d.size(0)).max().item() / 1e3
    per_kind, work = {}, {}
    for j, name in enumerate(names):
        per_kind[name] = per_kind.get(name, 0.0) + d[:, j].mean().item() / 1e3
        work[name] = work.get(name, 0.0) + busiest[j].item() / 1e3
    return per_kind, work, d.size(0), qkv


class Persistent(Static):
    runs = True  # the loop hands it every step up to the window's end: one launch
    gelus = ("erf",)  # its MLP phase computes the exact GELU
    max_vocab = MAX_VOCAB

    def __init__(self, model, batch_size, dcfg=None):
        super().__init__(model, batch_size, dcfg)
        from kernels import triton_persistent  # Triton loads only when this path is chosen
        self.kern = triton_persistent
        cfg, dev = model.cfg, model_device(model)
        dt = next(model.parameters()).dtype
        C, H, L, V, W = cfg.n_embd, cfg.n_head, cfg.n_layer, model.vocab_size, model.block_size
        self.check_vocab("persistent", V)
        self.shape = {"NB": batch_size, "C": C, "H": H, "L": L, "V": V, "W_CACHE": W}
        self.stack_caches()
        blocks = model.blocks
        self.w = restack(model)
        self.bias, self.ln_bias = cfg.bias, model.ln_f.bias is not None
        dummy = self.w["LN1_W"]  # never read when its flag is off
        self.w = {k: dummy if v is None else v for k, v in self.w.items()}
        self.w["FOLD"] = folded_norms(self.w, L, self.bias, self.ln_bias)
        self.packed = {}  # the matrices stored chunk by chunk now, with their chunk: name -> (BN, BK)
        self.eps, self.scale = model.ln_f.eps, blocks[0].attn.scale
        self.programs = 1 if interpreting() else torch.cuda.get_device_properties(dev).multi_processor_count
        self.set_tiles(plan(C, H, V, W, batch_size, self.programs, cost=str(getattr(dcfg, "tile_cost", "bytes")),
                            proj=str(getattr(dcfg, "attn_proj", "auto")), stages=int(getattr(dcfg, "stages", 3)),
                            elem=dt.itemsize, fold=bool(getattr(dcfg, "fold_ln", True)),
                            add_once=bool(getattr(dcfg, "add_once", False)),
                            by_hand=dict(getattr(dcfg, "tiles", None) or {})))
        # the barrier, then two counters per (layer, head): its q/k/v tiles, its rows' outputs in Y
        self.bar = torch.zeros(1 + 2 * L * H, device=dev, dtype=torch.int32)
        self.stamps = None  # a list while phase_profile runs
        self.logits = None  # (total, B, V) fp32, one row of logits per output column; sized on first run
        self.dtype = dt

    def set_tiles(self, tiles: dict) -> None:
        """Use these tiles (plan()'s keys) and size the scratch buffers for them."""
        B, C, L = self.batch_size, self.shape["C"], self.shape["L"]
        dev = self.kc.device

        def scratch(*shape):
            return torch.zeros(*shape, device=dev, dtype=torch.float32)

        self.tiles = tiles
        # the matrices the tiles read chunk by chunk (PACK_QKV, PACK_FC), stored so; any other back in rows
        chunks = {"W_QKV": (tiles["BN_QKV"], tiles["BK_QKV"]) if tiles.get("PACK_QKV") else None,
                  "W_FC": (tiles["BN_FC"], tiles["BK_FC"]) if tiles.get("PACK_FC") else None,
                  "W_P2T": (tiles["BN_FC"], tiles["BC_FC"]) if tiles.get("PACK_FC") else None,
                  "W_O": (C, C // self.shape["H"]) if tiles.get("PACK_O") else None}  # head-major
        for name, chunk in chunks.items():
            if self.packed.get(name) != chunk:
                if name in self.packed:
                    self.w[name] = unpack_chunks(self.w[name], *self.packed.pop(name))
                if chunk:
                    self.w[name], self.packed[name] = pack_chunks(self.w[name], *chunk), chunk
        # STREAM: the residual stream, a slot per phase; XS: each program's own copy of the slot its
        # phase reads (kernels/triton_decode_stream.py)
        # Y: every row's attention output, when the projection is shared by the rows (attn_proj=head);
        # with SPLIT each (row, head)'s shares of it (kernels/triton_decode_attention.py: _split_shares)
        H, BD = self.shape["H"], tiles["BD"]
        y = scratch(B * H * (-(-tiles["SPLIT"] // (B * H)) + 1) * (BD + 2)) if tiles.get("SPLIT") else scratch(B, C)
        self.buf = {"STREAM": scratch(2 * L + 1, tiles["REPS"], B, C), "QKV": scratch(B, 3 * C),
                    "XS": scratch(self.programs, B, C), "Y": y}

    def run(self, out, t, noise, temperature: float, top_k, n: int):
        """n decode steps: feed out[:, t - 1] at the cache position, sample out[:, t], advance t
        and the position, n times, in one launch. Returns the (total, B, V) logits by output
        column (a buffer the next run overwrites). Under phase_profile each launch also keeps its
        barriers' globaltimer stamps (ns) and, after them, each program's time in each phase."""
        total = out.size(1)
        if self.logits is None or self.logits.size(0) != total:
            self.logits = torch.zeros(total, self.batch_size, self.shape["V"], device=out.device)
        phases = self.phases_per_token(self.shape["L"])
        profile = self.stamps is not None
        prof = torch.zeros(1 + (n + self.programs) * phases + self.programs if profile else 1, device=out.device,
                           dtype=torch.int64)
        greedy = temperature == 0
        self.bar.zero_()
        self.kern._decode_run_kernel[(self.programs,)](
            out, t, self.pos, noise if noise is not None else self.logits, self.logits, self.bar, self.bar[1:], prof,
            self.w["WTE"], self.w["WPE"], self.w["LN1_W"], self.w["LN1_B"], self.w["W_QKV"], self.w["B_QKV"],
            self.w["W_O"], self.w["B_O"], self.w["LN2_W"], self.w["LN2_B"], self.w["W_FC"], self.w["B_FC"],
            self.w["W_P2T"], self.w["B_P2"], self.w["LNF_W"], self.w["LNF_B"], self.w["FOLD"], self.kc, self.vc,
            *self.buf.values(), n, 1.0 if greedy else float(temperature), int(top_k or 0), self.eps, self.scale,
            **self.shape, TOTAL=total, **self.tiles, HAS_BIAS=self.bias, HAS_LN_B=self.ln_bias, GREEDY=greedy,
            TOP_K=bool(top_k) and not greedy, PROFILE=profile,
            PREC="ieee" if self.dtype == torch.float32 else "tf32")  # the dot's rounding of fp32: none
        if profile:
            self.stamps.append(prof)
        return self.logits

    def phase_profile(self, dec, prompt) -> dict:
        """One generation with every barrier time-stamped (program 0 reads the GPU's globaltimer
        as it leaves each): µs per decode step (one token for each row of the batch) in each kind
        of phase, its share of the step, and the phases per step. A phase's time runs from the
        barrier that opens it to the next, so it includes that barrier's wait (during which the
        next phase's weights load). Beside each kind, phase_work_us_<kind>: per phase the time its
        busiest program spent from leaving one barrier to its arrival at the next (its mean over
        the steps), summed like the phases; the rest of the phase is the barrier's own wait;
        phase_work_us_attn_qkv: of the attn phases, the busiest program's time in its qkv tiles
        (the rest of a program's attn phase: waiting on its heads' counters, the attention and the
        projection). And barrier_us: the mean time of an empty barrier on the same grid, what no
        work inside the phases can remove."""
        k, L = self.kern, self.shape["L"]
        names = [*k.LAYER_PHASES * L, *k.TOKEN_PHASES]
        self.stamps = []
        try:
            dec(prompt)
        finally:
            stamps, self.stamps = self.stamps, None
        if not stamps:  # a generation of one token: the prefill sampled it, no launch ran
            return {}
        per_kind, work, steps, qkv = phase_times(stamps, names, self.programs)
        total = sum(per_kind.values())
        empty = torch.zeros(BARRIERS_TIMED + self.programs, device=self.bar.device, dtype=torch.int64)
        self.bar.zero_()
        k._barrier_run_kernel[(self.programs,)](self.bar, empty, BARRIERS_TIMED, num_warps=self.tiles["num_warps"])
        # the mean over the run, not a median of differences: those are a few ticks of the timer
        barrier_us = (empty[BARRIERS_TIMED - 1] - empty[0]).item() / (BARRIERS_TIMED - 1) / 1e3
        return {**{f"phase_us_{n}": v for n, v in per_kind.items()}, "barrier_us": barrier_us,
                **{f"phase_work_us_{n}": v for n, v in work.items()}, "phase_work_us_attn_qkv": qkv,
                **{f"phase_share_{n}": v / total for n, v in per_kind.items()},
                "phases_per_token": len(names), "phase_us_per_token": total, "phase_steps": steps}

    @staticmethod
    def phases_per_token(n_layer: int) -> int:
        from kernels.triton_persistent import PHASES_PER_LAYER, PHASES_PER_TOKEN_EXTRA
        return PHASES_PER_LAYER.value * n_layer + PHASES_PER_TOKEN_EXTRA.value

    @classmethod
    def check(cls, cfg, device) -> None:
        check_triton_step(cfg, device)
        by_hand = dict(getattr(cfg.decode, "tiles", None) or {})
        if by_hand:  # checked at the Shakespeare vocabulary (the data's is not known yet) and this GPU's SMs
            m, dev = cfg.model, torch.device(device)
            programs = torch.cuda.get_device_properties(dev).multi_processor_count if dev.type == "cuda" else 1
            error = by_hand_error(by_hand, m.n_embd, m.n_head, 65, m.block_size, cfg.generate.batch_size, programs)
            if by_hand.get("L2_NEXT") is True and dev.type != "cuda":
                error = ("decode.tiles.L2_NEXT=true: a PTX prefetch, for a CUDA GPU; "
                         "the Triton interpreter cannot run it")
            if error:
                raise ValueError(error)

    @classmethod
    def kernels_per_token(cls, shape, bf16: bool) -> int:
        """Grid barriers per token: each costs about what a graph node does (one round trip of
        the GPU's own scheduling), so the launch term prices them at graph_node_us."""
        return cls.phases_per_token(shape.n_layer)

    @classmethod
    def launch_key(cls, device) -> str:
        return "graph_node_us" if torch.device(device).type == "cuda" else "op_infer_us"
