"""The one-launch decode path's tiles (decode/persistent.py), from the shape (plan), and the keys
a user may set by hand over them (decode.tiles: by_hand_error checks them before any work)."""

import triton

REGISTERS_PER_THREAD = 64  # fp32 values a thread may hold for one tile's products (no spills)
# attn_proj=auto shares the projection across the rows when that saves at least this many bytes of
# W_proj reads a layer: about what one more hand-over costs in streaming time (on the H200 sharing
# won at 8 MB saved a layer and more, and lost at 3.5 MB and less)
SHARE_BYTES = 6 << 20
COPY, SLOT = 1, 2  # the folded LayerNorm's forms (kernels/triton_decode_stream.py: COPY, SLOT)
SHARED_MEMORY = 192 << 10  # bytes of a program's shared memory the pipelined weight chunks may fill
QKV_DOT_CHUNK = 128  # the tensor-core qkv loop's chunk where it takes several (see plan's tiles)


def _pow2(n: int) -> int:
    return triton.next_power_of_2(max(1, int(n)))


def _prev_pow2(n: int) -> int:
    return 1 << (max(1, int(n)).bit_length() - 1)


def plan(C: int, H: int, V: int, W: int, batch: int, programs: int, num_warps: int | None = None,
         budget: int | None = None, cost: str = "bytes", proj: str = "auto", stages: int = 3,
         elem: int = 2, fold: bool = True, add_once: bool = False, by_hand: dict | None = None) -> dict:
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
    may have several tiles. DOT_FC: the MLP's own form (DOT's unless by hand), its rows padded
    to B_PAD_FC, its chunks one ahead (AHEAD_FC) only on the multiply-adds. SPAN_QKV, SPAN_FC:
    the rows a tile of the phase takes: its BN, or fewer where that spreads the phase over
    programs its tiles of BN would leave idle (planned for the multiply-add form's qkv phase;
    elsewhere by hand). elem: bytes of a
    weight. by_hand (decode.tiles): keys of SETTABLE taken as given, the rest planned around them
    (DOT=true: the tensor-core form at any batch; a BN or BK: the phase's other tile, its ONE,
    the MLP's BC and the pipeline follow from it)."""
    fixed = dict(by_hand or {})
    # eight warps a program: their doubled register budget holds twice the bytes in flight and
    # the cache in half the slot blocks (the A/B: experiments/results/h200-2026-12-01d); sixteen,
    # with the budget doubled again, spilled and lost at batch 1 (h200-2026-12-02d)
    num_warps = fixed.get("num_warps") or num_warps or 8
    budget = budget or REGISTERS_PER_THREAD * 32 * num_warps
    dot = fixed.get("DOT", batch > 1)  # several rows: the tensor cores (a 16-row tile, padded), not per-row FMAs

    def rows_padded(on_dot):  # the rows a phase's products hold: 16 at least on the tensor cores
        return max(16, _pow2(batch)) if on_dot else _pow2(batch)

    def tiles(name, groups, group, K, parts, on_dot):
        """The phase's (BN, BK, rounds, SPAN): its tile, reduction chunk, the busiest program's
        rounds of loads, and the rows a tile takes."""
        pad = rows_padded(on_dot)
        # a weight element costs a register per row on the multiply-add form (the inputs are held
        # in the weights' layout); a dot holds its weight tile and its inputs: half of one each.
        # (Pipelined, a dot's chunks sit in shared memory, but larger ones still lost: MLP chunks of
        # 64 x 256 at 1152 wide, bf16, 0.90-0.94x at batch 1, 4 and 8 on the H200)
        cap = budget // 2 if on_dot else budget // pad
        bns = [fixed[f"BN_{name}"]] if f"BN_{name}" in fixed else \
            [1 << i for i in range(4 if on_dot else 0, max(5, _pow2(group).bit_length()))]
        bks = [fixed[f"BK_{name}"]] if f"BK_{name}" in fixed else [1 << i for i in range(4, _pow2(K).bit_length())]
        pairs = [(bn, bk, fixed.get(f"SPAN_{name}", bn)) for bn in bns for bk in bks]
        best = None
        for bn, bk, span in [(n, k, s) for n, k, s in pairs if n * k <= cap and pad * k <= budget and s <= n] \
                or pairs:  # by hand: as given (by_hand_error says what is wrong)
            n_tiles = groups * triton.cdiv(group, span)
            mine = triton.cdiv(n_tiles, programs)  # the busiest program's tiles
            rounds = mine * triton.cdiv(K, bk)
            idle = max(0, programs - n_tiles)  # programs whose bandwidth the phase leaves unused
            waste = triton.cdiv(K, bk) * bk - K  # padded columns loaded for nothing
            rank = (rounds,)
            if cost == "bytes" and on_dot:  # 16-bit weights, fp32 stream parts for the batch's rows
                # fewest tiles first: each restarts the pipelined loop and ends in its own epilogue
                # (1152 wide, batch 1: one MLP tile of 64 x 128 a program, 1.07x the multiply-adds)
                rank = (mine, mine * K * (2 * span + 4 * parts * batch), rounds)
            if best is None or (*rank, idle, waste) < best[0]:
                best = ((*rank, idle, waste), bn, bk, rounds, span)
        _, bn, bk, rounds, span = best
        # the tensor-core qkv loop of 16-bit weights (pipelined) in chunks of QKV_DOT_CHUNK where it
        # takes more than one round: more, smaller chunks through the same pipeline (on the H200,
        # bf16: 1152 wide, batch 4 and 8, attn phase 335 -> 303 and 417 -> 378 us a token; 768 wide,
        # 153 -> 152 and 165 -> 160; the MLP's chunks at 768 wide the other way, 146 -> 167 us of
        # MLP phase at batch 8). fp32 weights, never pipelined, keep the rounds' ranking
        if name == "QKV" and on_dot and elem == 2 and rounds > 1 and bk > QKV_DOT_CHUNK and f"BK_{name}" not in fixed:
            rounds = rounds // triton.cdiv(K, bk) * triton.cdiv(K, QKV_DOT_CHUNK)
            bk = QKV_DOT_CHUNK
        # a tile may take fewer rows than its BN (SPAN, masked): group / (programs / groups) rows
        # spread a phase whose tiles leave programs idle (108 qkv tiles of 32 on 132 programs: 126
        # of 28) over them, within a head. Planned for the multiply-add form's qkv phase of
        # several rounds, its tile unchanged and no round added: on the H200, 1152 wide, batch 1,
        # the attn phase went from 278 to 260 us a token (768 wide, where spans of 18 came with
        # tiles of 32 x 512 instead of 16 x 1024, from 124 to 153). Not on the tensor cores, where
        # they measured no faster (1152 wide, batch 4 and 8: MLP spans of 35 in 64, 0.97-0.99x;
        # 768 and 384 wide, 0.98-1.00x; qkv spans of 27 in 32 at 1152 wide, batch 8, 0.83x): a
        # program there waits on its chunks' round trips, whatever their size
        even = triton.cdiv(group, max(1, programs // groups))
        if name == "QKV" and not on_dot and f"SPAN_{name}" not in fixed and rounds > 1 and even < span and \
                triton.cdiv(groups * triton.cdiv(group, even), programs) * triton.cdiv(K, bk) <= rounds:
            span = even
        return bn, bk, rounds, span

    phases = {"QKV": (H, 3 * (C // H), C, 3), "FC": (1, 4 * C, C, 2), "V": (1, V, C, 3)}
    # the MLP's own form: the tensor cores' pipelined loops, also at batch 1 where the multiply-add
    # MLP takes more than two rounds a program (on the H200, 1152 wide: five rounds, 1.07x on the
    # tensor cores; 768 wide: two, 0.84x)
    dot_fc = fixed.get("DOT_FC", dot or tiles("FC", *phases["FC"], False)[2] > 2)
    b_pad = rows_padded(dot)
    D = C // H
    BD = _pow2(D)
    # num_stages 1: no software pipelining of the whole kernel (two stages measured slower,
    # experiments/results/h200-2026-12-01d); its weight loops pipeline on their own (STAGES)
    t = {"B_PAD": b_pad, "BD": BD, "VP": _pow2(V), "CP": _pow2(C), "num_warps": num_warps, "num_stages": 1,
         "DOT": dot, "DOT_FC": dot_fc, "B_PAD_FC": rows_padded(dot_fc)}
    t["CH"] = fixed.get("CH", max(1, min(t["VP"], budget // t["VP"])))
    for name, shape in phases.items():
        bn, bk, rounds, span = tiles(name, *shape, dot_fc if name == "FC" else dot)
        t[f"BN_{name}"], t[f"BK_{name}"], t[f"ONE_{name}"] = bn, bk, rounds == 1
        if name != "V":
            t[f"SPAN_{name}"] = span
    t["BC_FC"] = fixed.get("BC_FC", t["BK_FC"])  # the MLP's second product, (units x outputs): the first one's size
    # the projection: its items -- (row, head), or (head) alone for all rows at once -- split its
    # outputs into as many chunks as there are programs for them; a chunk that fits a quarter of the
    # budget loads ahead (ONE_O: it is held through the qkv phase), a larger one loads after the
    # attention, in blocks of the budget (half of it for a shared dot, which holds its inputs too)
    shared = fixed.get("SHARED_O", proj == "head" or (proj == "auto" and (batch - 1) * C * C * elem >= SHARE_BYTES))
    items = (1 if shared else batch) * H
    chunks = fixed.get("O_CHUNKS", max(1, min(triton.cdiv(C, 16), programs // items)))
    width = triton.cdiv(C, chunks)
    one_o = fixed.get("ONE_O", _pow2(width) * BD * 4 <= budget and items * chunks <= programs)
    cap_o = budget // (2 * BD) if shared and dot else budget // BD
    bn_o = fixed.get("BN_O", _pow2(width) if one_o else
                     max(16 if shared and dot else 1, min(_pow2(width), _prev_pow2(cap_o))))
    t["O_CHUNKS"], t["BN_O"], t["ONE_O"], t["SHARED_O"] = chunks, bn_o, one_o, shared
    # by hand only (SPLIT_KV), with the shared projection: the attention's cache slots cut into one
    # equal run a program (SPLIT runs) instead of a (row, head) item a program, which leaves some
    # programs two items where the items outnumber the programs (1152 wide, batch 8: 144 on 132)
    # and most idle where they are few; the projection's items combine the runs' shares. By hand
    # because the hand-overs cost more than the balance buys: 0.79-0.81x at batch 8 on an H100
    # (experiments/results/h100-2026-12-07c)
    t["SPLIT"] = programs if fixed.get("SPLIT_KV", False) and shared else 0
    # the cache's slot blocks: k and v held as loaded, two registers a slot and dimension in fp32,
    # one in a 16-bit dtype; a block of the whole window is one trip to memory fewer for the head,
    # and, as the slots before this step's are final, its keys load before the attn phase opens
    regs = 1 if elem == 2 else 2
    t["BT"] = fixed.get("BT", max(16, min(_pow2(W), _prev_pow2(budget // (regs * BD)))))
    # software pipelining: STAGES chunks of the weights in flight, as many as SHARED_MEMORY holds
    # (the MLP's two loops hold theirs at once); on the tensor cores, fewer than the MLP's
    # reduction has chunks: a pipeline as deep as the loop only fills (on the H200, bf16: 9 chunks
    # a tile, 1152 wide at batch 4 and 8, three deep 1.11-1.12x; 3 chunks, 768 wide at batch 8,
    # three deep 0.98x, two deep 1.05x; four deep at 1152 wide, batch 1, 4 and 8: 1.00-1.02x,
    # within the spread between calls, so three stays the default); the multiply-add form, never
    # measured pipelined, only where the loop is twice the pipeline; not for fp32 weights, whose
    # pipelined tiles spill kilobytes of registers (sm_90 compile, 1152-4096 wide: 4-7 KB against
    # 88 bytes unpipelined)
    chunk = max(t["BN_QKV"] * t["BK_QKV"], t["BN_FC"] * t["BK_FC"], t["BN_V"] * t["BK_V"]) * elem
    stages = max(1, min(stages, SHARED_MEMORY // (2 * chunk))) if elem == 2 else 1
    fc_chunks = triton.cdiv(C, t["BK_FC"])
    deepest = min(stages, fc_chunks - 1) if dot_fc else stages if fc_chunks >= 2 * stages else 1
    t["STAGES"] = fixed.get("STAGES", max(1, deepest))
    # the multiply-add form's chunks load one ahead (the pipeliner does not stream them): on the
    # H200 1.05x at 1152 wide, batch 1; the tensor cores' unpipelined tiles held the extra chunk
    # in spilled registers (0.95x at 768 wide, batch 4 and 8)
    t["AHEAD"] = fixed.get("AHEAD", not dot)
    t["AHEAD_FC"] = t["AHEAD"] and not dot_fc  # the MLP's own form decides for its loops
    t["ADD_ONCE"] = fixed.get("ADD_ONCE", add_once and not dot_fc and t["BC_FC"] >= C and not t["ONE_FC"])
    # by hand only: a pipelined loop's first chunk loaded at the barrier that opens its phase, as
    # ONE and AHEAD load theirs -- the qkv tiles', W_fc's, W_P2T's. Held through the wait, they
    # cost registers (sm_90 compile, Triton 3.9: spill stores from 160 to 360 bytes at 768 wide,
    # batch 8, and from 340 to 1,216 at 1152 wide), and on the H200 they lost at every row tried:
    # 0.82-1.00x at 768 and 1152 wide, batch 4 and 8, and 0.99x for the MLP's at 1152 wide, batch 1
    for key in ("PRE_QKV", "PRE_FC", "PRE_P2"):
        t[key] = fixed.get(key, False)
    # by hand only: the qkv phase's and the MLP's weights stored chunk by chunk (PACK_QKV, PACK_FC:
    # decode/restack.py's pack_chunks), each chunk a program loads one contiguous run of BN * BK
    # weights, where a row-major chunk is BN runs of BK, each a row apart; where the phase's tiles
    # are whole (SPAN == BN) and its chunks divide the rows, and a phase of one round reads whole
    # rows already. On an H100, bf16, 1152 wide at batch 1 and 8: the MLP phase 3-4% shorter,
    # tok/s 0.3-2.4% higher, one run each, within the spread between calls; a bare streaming loop
    # gained 4% from it, and 14-19% from a pipeline four or five deep instead of three: the bytes in
    # flight, not the runs' length, set the rate (experiments/results/h100-2026-12-07b)
    pack = fixed.get("PACK", False)
    t["PACK_QKV"] = pack and not t["ONE_QKV"] and t["SPAN_QKV"] == t["BN_QKV"] and \
        (3 * D) % t["BN_QKV"] == 0 and C % t["BK_QKV"] == 0
    t["PACK_FC"] = pack and not t["ONE_FC"] and t["SPAN_FC"] == t["BN_FC"] and \
        (4 * C) % t["BN_FC"] == 0 and C % t["BK_FC"] == 0 and C % t["BC_FC"] == 0
    # and the projection's weights head-major (PACK_O): a head's block of W_proj, D columns of
    # every row, one run instead of a run of D weights a row
    t["PACK_O"] = pack
    # by hand only: as a phase opens, each program asks L2 for weights it loads later -- its
    # projection chunk, its first MLP tile, its next layer's first qkv tile -- (a PTX prefetch, no
    # registers held), so that the phase that loads them finds them in L2. CUDA only. On the H200,
    # bf16, it lost at every row tried (0.85-0.96x at 768 and 1152 wide, batch 1, 4 and 8): the
    # attn phase it is issued in slowed by 13-55 us a token and the phases it fed gained little or
    # nothing -- the prefetches queue ahead of the phase's own loads
    t["L2_NEXT"] = fixed.get("L2_NEXT", False)
    # the copies of a stream slot the MLP's programs add into by turns (kernels/triton_decode_stream.py):
    # every SM's atomics on the same C floats cost ~1 us more a phase than the barrier alone, 8
    # copies ~0.05-0.45 us, and a reader sums 8 copies of a 384-float slot 35 ns slower than one
    # (H200, experiments/results/h200-2026-12-04b, a bench of the pattern). Four where they pay:
    # one row, an MLP of one round whose every program adds its share into the whole row at about
    # the same time (384 wide, batch 1: 74.1 -> 71.5 us a token with 4 or 8 copies). Elsewhere one:
    # a phase of several rounds spreads its programs' adds out in time (768 wide, batch 1: 0.998x
    # with 4), more outputs spread them over addresses (1152 wide, batch 1, 8 copies: 0.96x), and a
    # batch multiplies what each reader sums (384 wide, batch 4, 8 copies: 0.83x;
    # experiments/results/h200-2026-12-04c)
    t["REPS"] = fixed.get("REPS", 4 if batch == 1 and t["ONE_FC"] and t["BC_FC"] >= C else 1)
    # a phase of more than one round moves its LayerNorm past its products (FOLD_*,
    # kernels/triton_decode_stream.py): no pass over the slot before its first product (on the
    # H200, 1152 wide, bf16: 1.10x at batch 8, 1.11x at batch 4, 1.04x at batch 1). Its tiles read
    # the slot itself (SLOT) where that measured faster: the qkv phase at batch 1 (1152 wide: 283
    # us of attn phase a token against 310 with COPY) and a pipelined MLP whose loop is at least
    # twice the pipeline (1152 wide, batch 8: 270 us of MLP against 317); elsewhere the first tile
    # copies it (COPY: SLOT lost 7-9% at 768 wide, batch 4 and 8, and in the sm_90 compile spilled
    # 1.3 KB there and 4.4 KB in a batch-1 MLP of several tiles at 1536 wide, against none with
    # COPY; the two-deep MLP at 768 wide was measured with COPY)
    slot = {"QKV": not dot, "FC": t["STAGES"] > 1 and fc_chunks >= 2 * t["STAGES"], "V": False}
    for name in slot:
        t[f"FOLD_{name}"] = fixed.get(f"FOLD_{name}", 0 if t[f"ONE_{name}"] or not fold else
                                      SLOT if slot[name] else COPY)
    return t


# what decode.tiles may set: the plan's choices (the rest -- B_PAD, BD, VP, CP, ONE_QKV/FC/V,
# num_stages -- follows from the shape and from these), with the values each may take
FLAGS = ("DOT", "DOT_FC", "AHEAD", "ADD_ONCE", "SHARED_O", "ONE_O", "PRE_QKV", "PRE_FC", "PRE_P2", "L2_NEXT", "PACK",
         "SPLIT_KV")
POW2 = {"BN_QKV": 1, "BK_QKV": 16, "BN_FC": 1, "BK_FC": 16, "BC_FC": 16, "BN_V": 1, "BK_V": 16, "BN_O": 1,
        "BT": 16, "CH": 1, "num_warps": 1}
RANGES = {"STAGES": (1, 6), "REPS": (1, 16), "FOLD_QKV": (0, 2), "FOLD_FC": (0, 2), "FOLD_V": (0, 2),
          "O_CHUNKS": (1, 1 << 16), "SPAN_QKV": (1, 1 << 16), "SPAN_FC": (1, 1 << 16)}
SETTABLE = (*FLAGS, *POW2, *RANGES)


def by_hand_error(by_hand: dict, C: int, H: int, V: int, W: int, batch: int, programs: int) -> str | None:
    """The first thing wrong with decode.tiles as one line (None: nothing): a key the plan does
    not let you set, a value out of its range, or a plan the kernel cannot compile with them
    (a dot tile under 16 outputs, the MLP's chunks loaded one ahead of different sizes, shares
    added once on the tensor cores or over more than one output chunk, a LayerNorm folded into a
    phase whose weights all load at the barrier, the attention split in runs without the shared
    projection)."""
    for key, value in by_hand.items():
        if key not in SETTABLE:
            return f"decode.tiles.{key}: not a plan key you can set; they are {', '.join(SETTABLE)}"
        flag = isinstance(value, bool)
        if key in FLAGS and not flag or key not in FLAGS and (flag or not isinstance(value, int)):
            return f"decode.tiles.{key}={value!r}: it takes {'true or false' if key in FLAGS else 'an integer'}"
        if key in POW2 and (value < POW2[key] or value & (value - 1)):
            return f"decode.tiles.{key}={value}: it takes a power of two, at least {POW2[key]}"
        if key in RANGES and not RANGES[key][0] <= value <= RANGES[key][1]:
            return f"decode.tiles.{key}={value}: it takes {RANGES[key][0]} to {RANGES[key][1]}"
    t = plan(C, H, V, W, batch, programs, by_hand=by_hand)
    on_dot = {"QKV": t["DOT"], "FC": t["DOT_FC"], "V": t["DOT"]}
    rules = ((all(t[f"BN_{n}"] >= 16 for n in on_dot if on_dot[n]), "a tensor-core tile has 16 outputs or more"),
             (all(t[f"SPAN_{n}"] <= t[f"BN_{n}"] for n in ("QKV", "FC")), "a tile's rows (SPAN_*) fit its BN"),
             (t["ONE_FC"] or not t["AHEAD_FC"] or t["BC_FC"] == t["BK_FC"],
              "chunks loaded one ahead (AHEAD) need BC_FC == BK_FC"),
             (not t["ADD_ONCE"] or (not t["DOT_FC"] and t["BC_FC"] >= C),
              "ADD_ONCE needs the multiply-add form and BC_FC >= C"),
             (all(not (t[f"ONE_{n}"] and t[f"FOLD_{n}"]) for n in ("QKV", "FC", "V")),
              "a phase of one round (ONE_*) keeps its LayerNorm before its products (FOLD_* = 0)"),
             (not t["PRE_QKV"] or not (t["ONE_QKV"] or t["AHEAD"]), "PRE_QKV needs a qkv loop without ONE or AHEAD"),
             (not (t["PRE_FC"] or t["PRE_P2"]) or not (t["ONE_FC"] or t["AHEAD_FC"]),
              "PRE_FC and PRE_P2 need an MLP loop without ONE or AHEAD"),
             (not by_hand.get("SPLIT_KV") or t["SHARED_O"], "SPLIT_KV needs the shared projection (SHARED_O)"))
    for ok, why in rules:
        if not ok:
            return f"decode.tiles ({', '.join(f'{k}={t.get(k, by_hand[k])}' for k in by_hand)}): {why}"
    return None
