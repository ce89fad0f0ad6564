"""decode=persistent: every decode step up to the window's end in one launch of
kernels/triton_persistent.py -- a grid of one program per SM that stays resident and runs each
step's 2 phases per layer (plus the head and the sample) between grid-wide barriers, sampling on
the device from the loop's pre-drawn Gumbel noise. The prompt, and the re-prefill when the window
restarts, go through the model itself into the same static cache (decode/static.py).

Its weights are restacked once, layer-major, when the path is built (one copy of the model's
weights: the kernel walks the layers by offset); the qkv rows head-major, so that one head's q,
k and v are one block of rows, which the head's attention waits on alone."""

import torch
import triton

from ..runtime import interpreting
from .base import check_triton_step, model_device
from .static import Static

REGISTERS_PER_THREAD = 64  # fp32 values a thread may hold for one tile's products (no spills)
# attn_proj=auto shares the projection across the rows when that saves at least this many bytes of
# W_proj reads a layer: about what one more hand-over costs in streaming time (on the H200 sharing
# won at 8 MB saved a layer and more, and lost at 3.5 MB and less)
SHARE_BYTES = 6 << 20
COPY, SLOT = 1, 2  # the folded LayerNorm's forms (kernels/triton_decode_stream.py: COPY, SLOT)
SHARED_MEMORY = 192 << 10  # bytes of a program's shared memory the pipelined weight chunks may fill
MAX_VOCAB = 4096  # the sample phase holds a whole row of logits in one program
BARRIERS_TIMED = 1000  # empty grid barriers run back to back to price one


def _pow2(n: int) -> int:
    return triton.next_power_of_2(max(1, int(n)))


def _prev_pow2(n: int) -> int:
    return 1 << (max(1, int(n)).bit_length() - 1)


def plan(C: int, H: int, V: int, W: int, batch: int, programs: int, num_warps: int | None = None,
         budget: int | None = None, cost: str = "bytes", proj: str = "auto", stages: int = 3,
         elem: int = 2, fold: bool = True, add_once: bool = False, dot: bool | None = None) -> dict:
    """Tiles from the shape. Each matvec phase takes the output tile BN and the reduction chunk BK
    (within the register budget -- fp32 values per program) with the fewest rounds of loads per
    program, each round a full trip to L2 or memory: ceil(tiles / programs) * ceil(K / BK); among
    equals the one that leaves the fewest programs idle (their bandwidth unused), then the least
    padding of K. cost="bytes" (the default, decode.tile_cost) ranks the tensor-core form's tiles
    by the bytes a program loads instead: its weights and, for every tile and chunk again, the
    batch's stream, which narrow tiles reread many times, weighted as up to three fp32 parts a row
    (its parts before each program kept its own copy; the weighting the H200 ranked best: wider
    MLP tiles at 1152 wide, batch 4 and 8, 1.27-1.28x the rounds ranking). The qkv tiles
    never straddle two heads (each head's attention waits on its own tiles). A phase that then
    needs one round (ONE) loads its weights at the barrier that opens it; on the multiply-add
    form (AHEAD) any other phase loads its first chunk there and each later one a chunk ahead of
    the products. The projection's items -- (row, head, chunk of its outputs), or with
    proj="head" (head, chunk) for every row at once (decode.attn_proj; "auto": shared where that
    saves SHARE_BYTES of W_proj reads a layer) -- use as many chunks as there are programs for
    them; a chunk small enough to hold through the qkv phase loads ahead too (ONE_O). STAGES:
    the weight-chunk loops' software-pipelining depth (decode.stages), as deep as SHARED_MEMORY
    holds that many of the largest chunk. FOLD_QKV, FOLD_FC, FOLD_V: where a phase's LayerNorm
    goes after its products (fold: decode.fold_ln). ADD_ONCE (add_once: decode.add_once): the
    batch-1 MLP's shares added once a program, where its one output chunk covers C and a program
    may have several tiles. elem: bytes of a weight."""
    # eight warps a program: their doubled register budget holds twice the bytes in flight and
    # the cache in half the slot blocks (the A/B: experiments/results/h200-2026-12-01d); sixteen,
    # with the budget doubled again, spilled and lost at batch 1 (h200-2026-12-02d)
    num_warps = num_warps or 8
    budget = budget or REGISTERS_PER_THREAD * 32 * num_warps
    dot = batch > 1 if dot is None else dot  # several rows: the tensor cores (a 16-row tile, padded), not per-row FMAs
    b_pad = max(16, _pow2(batch)) if dot else 1
    D = C // H
    BD = _pow2(D)
    rows = 1 if dot else b_pad  # the products' register cost per weight element
    t = {"B_PAD": b_pad, "BD": BD, "VP": _pow2(V), "CP": _pow2(C), "num_warps": num_warps, "num_stages": 1,
         "DOT": dot}  # no software pipelining: two stages measured slower (experiments/results/h200-2026-12-01d)
    t["CH"] = max(1, min(t["VP"], budget // t["VP"]))
    # a weight element costs a register per row on the multiply-add form (the inputs are held in
    # the weights' layout); a dot holds its weight tile and its inputs: half of one each
    cap = budget // rows if not dot else budget // 2
    for name, groups, group, K, parts in (("QKV", H, 3 * D, C, 3), ("FC", 1, 4 * C, C, 2), ("V", 1, V, C, 3)):
        best = None
        for bn in (1 << i for i in range(4 if dot else 0, max(5, _pow2(group).bit_length()))):
            for bk in (1 << i for i in range(4, _pow2(K).bit_length())):
                if bn * bk > cap or b_pad * bk > budget:
                    continue
                tiles = groups * triton.cdiv(group, bn)
                rounds = triton.cdiv(tiles, programs) * triton.cdiv(K, bk)
                idle = max(0, programs - tiles)  # programs whose bandwidth the phase leaves unused
                waste = triton.cdiv(K, bk) * bk - K  # padded columns loaded for nothing
                rank = (rounds,)
                if cost == "bytes" and dot:  # 16-bit weights, fp32 stream parts for the batch's rows
                    rank = (triton.cdiv(tiles, programs) * K * (2 * bn + 4 * parts * batch), rounds)
                if best is None or (*rank, idle, waste) < best[0]:
                    best = ((*rank, idle, waste), bn, bk, rounds)
        t[f"BN_{name}"], t[f"BK_{name}"], t[f"ONE_{name}"] = best[1], best[2], best[3] == 1
    t["BC_FC"] = t["BK_FC"]  # the MLP's second product, (units x outputs), has the first one's size
    # the projection: its items -- (row, head), or (head) alone for all rows at once -- split its
    # outputs into as many chunks as there are programs for them; a chunk that fits a quarter of the
    # budget loads ahead (ONE_O: it is held through the qkv phase), a larger one loads after the
    # attention, in blocks of the budget (half of it for a shared dot, which holds its inputs too)
    shared = proj == "head" or (proj == "auto" and (batch - 1) * C * C * elem >= SHARE_BYTES)
    items = (1 if shared else batch) * H
    chunks = max(1, min(triton.cdiv(C, 16), programs // items))
    width = triton.cdiv(C, chunks)
    one_o = _pow2(width) * BD * 4 <= budget and items * chunks <= programs
    cap_o = budget // (2 * BD) if shared and dot else budget // BD
    bn_o = _pow2(width) if one_o else max(16 if shared and dot else 1, min(_pow2(width), _prev_pow2(cap_o)))
    t["O_CHUNKS"], t["BN_O"], t["ONE_O"], t["SHARED_O"] = chunks, bn_o, one_o, shared
    # the cache's slot blocks: k and v held as loaded, two registers a slot and dimension in fp32,
    # one in a 16-bit dtype; a block of the whole window is one trip to memory fewer for the head,
    # and, as the slots before this step's are final, its keys load before the attn phase opens
    regs = 1 if elem == 2 else 2
    t["BT"] = max(16, min(_pow2(W), _prev_pow2(budget // (regs * BD))))
    # software pipelining: STAGES chunks of the weights in flight, as many as SHARED_MEMORY holds
    # (the MLP's two loops hold theirs at once), and fewer than the MLP's reduction has chunks: a
    # pipeline as deep as the loop only fills (on the H200, bf16: 9 chunks a tile, 1152 wide at
    # batch 4 and 8, three deep 1.11-1.12x; 3 chunks, 768 wide at batch 8, three deep 0.98x, two
    # deep 1.05x); not for fp32 weights, whose pipelined tiles spill kilobytes of registers (sm_90
    # compile, 1152-4096 wide: 4-7 KB against 88 bytes unpipelined)
    chunk = max(t["BN_QKV"] * t["BK_QKV"], t["BN_FC"] * t["BK_FC"], t["BN_V"] * t["BK_V"]) * elem
    stages = max(1, min(stages, SHARED_MEMORY // (2 * chunk))) if elem == 2 else 1
    chunks = triton.cdiv(C, t["BK_FC"])
    t["STAGES"] = max(1, min(stages, chunks - 1))
    # the multiply-add form's chunks load one ahead (the pipeliner does not stream them): on the
    # H200 1.05x at 1152 wide, batch 1; the tensor cores' unpipelined tiles held the extra chunk
    # in spilled registers (0.95x at 768 wide, batch 4 and 8)
    t["AHEAD"] = not dot
    t["ADD_ONCE"] = add_once and not dot and t["BC_FC"] >= C and not t["ONE_FC"]
    # a phase of more than one round moves its LayerNorm past its products (FOLD_*,
    # kernels/triton_decode_stream.py): no pass over the slot before its first product (on the
    # H200, 1152 wide, bf16: 1.10x at batch 8, 1.11x at batch 4, 1.04x at batch 1). Its tiles read
    # the slot itself (SLOT) where that measured faster: the qkv phase at batch 1 (1152 wide: 283
    # us of attn phase a token against 310 with COPY) and a pipelined MLP whose loop is at least
    # twice the pipeline (1152 wide, batch 8: 270 us of MLP against 317); elsewhere the first tile
    # copies it (COPY: SLOT lost 7-9% at 768 wide, batch 4 and 8, and in the sm_90 compile spilled
    # 1.3 KB there and 4.4 KB in a batch-1 MLP of several tiles at 1536 wide, against none with
    # COPY; the two-deep MLP at 768 wide was measured with COPY)
    slot = {"QKV": not dot, "FC": t["STAGES"] > 1 and chunks >= 2 * t["STAGES"], "V": False}
    for name in slot:
        t[f"FOLD_{name}"] = 0 if t[f"ONE_{name}"] or not fold else SLOT if slot[name] else COPY
    return t


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


def phase_times(bufs, names, programs: int) -> tuple[dict, dict, int]:
    """From profiled launches' buffers (the kernel's PROF: the barriers' globaltimer stamps, then
    each program's ns in each phase of a step, summed over the launch's steps): µs per step in each
    kind of phase; per kind the busiest program's own µs, phase by phase, summed the same way; the
    steps seen."""
    P = len(names)
    split = [b.double().split([b.numel() - programs * P, programs * P]) for b in bufs]
    d = torch.cat([torch.diff(t).view(-1, P) for t, _ in split])  # (steps, phases) ns
    busiest = (sum(w for _, w in split).view(programs, P) / d.size(0)).max(0).values  # (phases,) ns a step
    per_kind, work = {}, {}
    for j, name in enumerate(names):
        per_kind[name] = per_kind.get(name, 0.0) + d[:, j].mean().item() / 1e3
        work[name] = work.get(name, 0.0) + busiest[j].item() / 1e3
    return per_kind, work, d.size(0)


class Persistent(Static):
    runs = True  # the loop hands it every step up to the window's end: one launch

    def __init__(self, model, batch_size, dcfg=None):
        super().__init__(model, batch_size, dcfg)
        from kernels import triton_persistent  # Triton loads only when this path is chosen
        self.kern = triton_persistent
        cfg, dev = model.cfg, model_device(model)
        dt = next(model.parameters()).dtype
        C, H, L, V, W = cfg.n_embd, cfg.n_head, cfg.n_layer, model.vocab_size, model.block_size
        if V > MAX_VOCAB:
            raise ValueError(f"decode=persistent samples a whole row of logits in one program: vocabulary "
                             f"{V} > {MAX_VOCAB}; use a decode path that samples outside its kernels")
        self.shape = {"NB": batch_size, "C": C, "H": H, "L": L, "V": V, "W_CACHE": W}
        # one (L, B, H, W, D) buffer per cache; the model's prefill writes its per-layer views
        self.kc = torch.stack(self.k)
        self.vc = torch.stack(self.v)
        self.k, self.v = list(self.kc.unbind(0)), list(self.vc.unbind(0))
        blocks = model.blocks

        def stack(get):
            return torch.stack([get(b).detach() for b in blocks]).contiguous()

        a, f = (lambda b: b.attn), (lambda b: b.mlp)
        D = C // H
        head_major = torch.arange(3 * C, device=dev).view(3, H, D).transpose(0, 1).reshape(-1)  # h: q_h, k_h, v_h
        self.w = {"W_QKV": stack(lambda b: a(b).c_attn.weight[head_major]), "W_O": stack(lambda b: a(b).c_proj.weight),
                  "W_FC": stack(lambda b: f(b).c_fc.weight), "W_P2T": stack(lambda b: f(b).c_proj.weight.t()),
                  "LN1_W": stack(lambda b: b.ln_1.weight), "LN2_W": stack(lambda b: b.ln_2.weight)}
        self.bias, self.ln_bias = cfg.bias, model.ln_f.bias is not None
        dummy = self.w["LN1_W"]  # never read when its flag is off
        qkv_bias = (lambda b: None if a(b).c_attn.bias is None else a(b).c_attn.bias[head_major])
        for key, get in (("B_QKV", qkv_bias), ("B_O", lambda b: a(b).c_proj.bias),
                         ("B_FC", lambda b: f(b).c_fc.bias), ("B_P2", lambda b: f(b).c_proj.bias),
                         ("LN1_B", lambda b: b.ln_1.bias), ("LN2_B", lambda b: b.ln_2.bias)):
            self.w[key] = stack(get) if get(blocks[0]) is not None else dummy
        self.w.update(WTE=model.wte.weight.detach(), WPE=model.wpe.weight.detach(),
                      LNF_W=model.ln_f.weight.detach(),
                      LNF_B=model.ln_f.bias.detach() if self.ln_bias else dummy)
        self.w["FOLD"] = folded_norms(self.w, L, self.bias, self.ln_bias)
        self.eps, self.scale = model.ln_f.eps, blocks[0].attn.scale
        self.programs = 1 if interpreting() else torch.cuda.get_device_properties(dev).multi_processor_count
        by_hand = dict(getattr(dcfg, "tiles", None) or {})  # decode.tiles: DOT re-plans, the rest overrides
        self.set_tiles({**plan(C, H, V, W, batch_size, self.programs, cost=str(getattr(dcfg, "tile_cost", "bytes")),
                               proj=str(getattr(dcfg, "attn_proj", "auto")), stages=int(getattr(dcfg, "stages", 3)),
                               elem=dt.itemsize, fold=bool(getattr(dcfg, "fold_ln", True)),
                               add_once=bool(getattr(dcfg, "add_once", False)), dot=by_hand.pop("DOT", None)),
                        **by_hand})
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
        # STREAM: the residual stream, a slot per phase; XS: each program's own copy of the slot its
        # phase reads (kernels/triton_decode_stream.py)
        # Y: every row's attention output, when the projection is shared by the rows (attn_proj=head)
        self.buf = {"STREAM": scratch(2 * L + 1, B, C), "QKV": scratch(B, 3 * C),
                    "XS": scratch(self.programs, B, C), "Y": scratch(B, C)}

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
        prof = torch.zeros(1 + (n + self.programs) * phases if profile else 1, device=out.device, dtype=torch.int64)
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
        the steps), summed like the phases; the rest of the phase is the barrier's own wait. And
        barrier_us: the mean time of an empty barrier on the same grid, what no work inside the
        phases can remove."""
        k, L = self.kern, self.shape["L"]
        names = [*k.LAYER_PHASES * L, *k.TOKEN_PHASES]
        self.stamps = []
        try:
            dec(prompt)
        finally:
            stamps, self.stamps = self.stamps, None
        if not stamps:  # a generation of one token: the prefill sampled it, no launch ran
            return {}
        per_kind, work, steps = phase_times(stamps, names, self.programs)
        total = sum(per_kind.values())
        empty = torch.zeros(BARRIERS_TIMED + self.programs, device=self.bar.device, dtype=torch.int64)
        self.bar.zero_()
        k._barrier_run_kernel[(self.programs,)](self.bar, empty, BARRIERS_TIMED, num_warps=self.tiles["num_warps"])
        # the mean over the run, not a median of differences: those are a few ticks of the timer
        barrier_us = (empty[BARRIERS_TIMED - 1] - empty[0]).item() / (BARRIERS_TIMED - 1) / 1e3
        return {**{f"phase_us_{n}": v for n, v in per_kind.items()}, "barrier_us": barrier_us,
                **{f"phase_work_us_{n}": v for n, v in work.items()},
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
        m = cfg.model
        keys = plan(m.n_embd, m.n_head, 65, m.block_size, cfg.generate.batch_size, 132) if by_hand else {}
        for key, value in by_hand.items():
            if key not in keys:
                raise ValueError(f"decode.tiles.{key} is not a key of decode=persistent's plan; it has "
                                 f"{', '.join(sorted(keys))}")
            if not isinstance(value, (bool, int)):
                raise ValueError(f"decode.tiles.{key}={value!r}: a plan key takes an int or a bool")

    @classmethod
    def kernels_per_token(cls, shape, bf16: bool) -> int:
        """Grid barriers per token: each costs about what a graph node does (one round trip of
        the GPU's own scheduling), so the launch term prices them at graph_node_us."""
        return cls.phases_per_token(shape.n_layer)

    @classmethod
    def launch_key(cls, device) -> str:
        return "graph_node_us" if torch.device(device).type == "cuda" else "op_infer_us"
