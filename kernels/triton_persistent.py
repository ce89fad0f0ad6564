"""The persistent decode run: a whole run of decode steps -- every layer of every token, the logits and
the sampling -- in ONE Triton launch.

At batch 1 a token is ~40 dependent steps of tiny work (LayerNorm, four matvecs, attention over
the cache, the head, the sample), so a launch (or a graph node) per step sets the time, not
bandwidth. Here a grid of at most one program per SM stays resident for the whole run and the
phases are separated by grid-wide barriers (an atomic counter every program adds to and waits
on), so a token costs PHASES barriers instead of ~40 launches, and each barrier costs about as
much as a small phase's work: two phases a layer.

  once:              embed    S[0] = wte[out[t-1]] + wpe[pos]
  per layer:     1.  attn     qkv = LN1(x) W_attn^T (+b) in tiles over the grid, k and v written
                              into the static cache; each head's attention starts as soon as that
                              head's tiles are counted done (a counter per head, not a barrier),
                              and adds its share of the projection into S[2l + 1] (per row, or,
                              with decode.attn_proj=head, once for all rows after a second count)
                 2.  mlp      S[2l + 2] += GELU(LN2(S[2l + 1]) W_fc^T (+b)) W_proj2^T, a share per program
  per token:         head     logits[t] = LN_f(x) wte^T
                     sample   out[t] = argmax(logits / T + gumbel[t]) (top-k first), S[0] = embed(out[t])

S is the residual stream, a slot per phase (each in REPS copies, which the MLP's programs add
into by turns): phase p reads S[p] and adds into S[p + 1], the residual term itself folded in by
one program. The phases are in kernels/triton_decode_phases.py
(the attention in kernels/triton_decode_attention.py, the MLP in kernels/triton_decode_mlp.py),
the stream (and each program's copy of a slot, XS) in kernels/triton_decode_stream.py; the tiles
come from the shape (decode/persistent_plan.py). Accumulation is fp32, and the residual stream,
q/k/v and the MLP hidden state are kept in fp32; from batch 2 the tensor-core products read them
in the weights' dtype. The cache keeps the weights' dtype, as every other path's does.

The grid must be co-resident (at most one program per SM, nothing else running), or the barrier
never opens. Under TRITON_INTERPRET=1 the programs run one after another, so the grid is one
program there and every barrier passes at once: the same code runs on CPU in the tests.
"""
import triton
import triton.language as tl

from . import triton_key  # noqa: F401 -- a fresh process reads Triton's cache key, not re-hashes it
from .triton_decode_attention import _attend, _keys_ahead
from .triton_decode_mlp import _mlp
from .triton_decode_phases import _matvec, _prefetch_l2, _sample_embed, _tile_rows, _wait, _weights

LAYER_PHASES = ("attn", "mlp")
TOKEN_PHASES = ("head", "sample")
# module constants a @triton.jit body reads must be tl.constexpr
PHASES_PER_LAYER = tl.constexpr(len(LAYER_PHASES))
PHASES_PER_TOKEN_EXTRA = tl.constexpr(len(TOKEN_PHASES))
PREFETCH_LINES = tl.constexpr(512)  # L2_NEXT: 128-byte lines asked for an instruction round (two a thread at 8 warps)


@triton.jit
def _arrive(BAR, k, WORK, since, PHASES: tl.constexpr, PROFILE: tl.constexpr):
    """Arrival at barrier number k (from 1). The release add publishes this program's stores. It
    also waits for the program's loads still in flight, so the loads for the next phase (its
    weights, the keys already in the cache) are issued after it, between the arrival and _leave:
    they then travel while the program waits for the others. With PROFILE, every program adds
    the time from `since` (when it left barrier k - 1) to its arrival -- its own work in the phase
    this barrier closes, phase k - 2 of a step of PHASES -- into WORK[program, (k - 2) % PHASES],
    after its arrival, so that the release does not wait for that add too."""
    tl.debug_barrier()  # every thread of this program has issued its stores
    tl.atomic_add(BAR, 1, sem="release", scope="gpu")
    if PROFILE:
        if k > 1:
            tl.atomic_add(WORK + tl.program_id(0) * PHASES + (k - 2) % PHASES, tl.extra.cuda.globaltimer() - since,
                          sem="relaxed")


@triton.jit
def _leave(BAR, k, PROF, since, PROFILE: tl.constexpr):
    """Wait until every program has arrived at barrier k; the acquire reads make their stores
    visible. (Polling with acquire loads instead of atomics measured no faster.) With PROFILE,
    program 0 stamps the GPU's globaltimer as it leaves: PROF[k - 1]. Returns the time it leaves
    (with PROFILE; else `since`)."""
    _wait(BAR, k * tl.num_programs(0))
    left = since
    if PROFILE:
        left = tl.extra.cuda.globaltimer()
        if tl.program_id(0) == 0:
            tl.store(PROF + k - 1, left)
    return left


@triton.jit
def _grid_sync(BAR, k, PROF, WORK, since, PHASES: tl.constexpr, PROFILE: tl.constexpr):
    """Barrier number k with nothing to load between arriving and leaving."""
    _arrive(BAR, k, WORK, since, PHASES, PROFILE)
    return _leave(BAR, k, PROF, since, PROFILE)


@triton.jit(do_not_specialize=["n"])
def _barrier_run_kernel(BAR, PROF, n):
    """n grid barriers and nothing between them: what one costs on its own, beside the phases it
    separates (program 0's globaltimer stamps in PROF[:n], as in a profiled run; each program's
    time between barriers in PROF[n + program])."""
    since = tl.extra.cuda.globaltimer()
    for k in range(1, n + 1):
        since = _grid_sync(BAR, k, PROF, PROF + n, since, 1, True)


@triton.jit(do_not_specialize=["n_steps", "top_k"])
def _decode_run_kernel(OUT, T_PTR, POS_PTR, NOISE, LOGITS, BAR, CNT, PROF,
                       WTE, WPE, LN1_W, LN1_B, W_QKV, B_QKV, W_O, B_O, LN2_W, LN2_B, W_FC, B_FC, W_P2T, B_P2,
                       LNF_W, LNF_B, FOLD, KC, VC, STREAM, QKV, XS, Y,
                       n_steps, temperature, top_k, eps, scale,
                       NB: tl.constexpr, C: tl.constexpr, H: tl.constexpr, L: tl.constexpr, V: tl.constexpr,
                       W_CACHE: tl.constexpr, TOTAL: tl.constexpr, B_PAD: tl.constexpr, BN_QKV: tl.constexpr,
                       BK_QKV: tl.constexpr, ONE_QKV: tl.constexpr, O_CHUNKS: tl.constexpr, BN_O: tl.constexpr,
                       ONE_O: tl.constexpr, SHARED_O: tl.constexpr,
                       BN_FC: tl.constexpr, BK_FC: tl.constexpr, BC_FC: tl.constexpr, ONE_FC: tl.constexpr,
                       BN_V: tl.constexpr, BK_V: tl.constexpr, ONE_V: tl.constexpr, BT: tl.constexpr,
                       BD: tl.constexpr, VP: tl.constexpr, CP: tl.constexpr, CH: tl.constexpr,
                       HAS_BIAS: tl.constexpr, HAS_LN_B: tl.constexpr, GREEDY: tl.constexpr, TOP_K: tl.constexpr,
                       PROFILE: tl.constexpr, DOT: tl.constexpr, PREC: tl.constexpr, STAGES: tl.constexpr,
                       AHEAD: tl.constexpr, FOLD_QKV: tl.constexpr, FOLD_FC: tl.constexpr,
                       FOLD_V: tl.constexpr, ADD_ONCE: tl.constexpr, DOT_FC: tl.constexpr, B_PAD_FC: tl.constexpr,
                       AHEAD_FC: tl.constexpr, SPAN_QKV: tl.constexpr, SPAN_FC: tl.constexpr,
                       PRE_QKV: tl.constexpr, PRE_FC: tl.constexpr, PRE_P2: tl.constexpr, L2_NEXT: tl.constexpr,
                       REPS: tl.constexpr, PACK_QKV: tl.constexpr, PACK_FC: tl.constexpr, PACK_O: tl.constexpr,
                       SPLIT: tl.constexpr):
    """n_steps decode steps: step i feeds out[:, t0 + i - 1] at cache slot pos0 + i and samples
    out[:, t0 + i] (t0, pos0 read from T_PTR, POS_PTR and advanced at the end). Each phase's
    first weight chunk loads while its program waits at the barrier that opens it (_arrive,
    _weights); with AHEAD each later chunk loads one ahead (kernels/triton_decode_phases.py).
    W_QKV's rows are head-major (head h's q, k, v together); CNT holds two counters per (layer,
    head), zero at launch: its q, k, v tiles done, then (SHARED_O) its rows' attention outputs in Y
    done (with SPLIT, the slots attended: the attention in SPLIT equal runs of the cache's slots,
    kernels/triton_decode_attention.py). FOLD_QKV, FOLD_FC, FOLD_V: how each phase's LayerNorm is done (0, COPY or SLOT:
    kernels/triton_decode_stream.py); FOLD (fp32) holds u and c for the folded ones, a layer's 14C
    values -- qkv's u, c, then W_fc's u, c -- and after the layers the head's. The MLP has a form
    of its own (DOT_FC, its rows padded to B_PAD_FC, AHEAD_FC): the tensor cores' pipelined loops
    can stream its weights faster than the multiply-adds even at batch 1. SPAN_QKV, SPAN_FC: the
    rows a tile of the qkv phase and of the MLP takes, at most its BN (_tile_rows). PRE_QKV,
    PRE_FC, PRE_P2: a pipelined loop's first chunk loads at the barrier too (_matvec's PRE).
    L2_NEXT: as a phase opens, each program asks L2 for weights it loads later: the attn phase for
    its projection chunk and its first MLP tile (W_fc's and W_proj2's rows), the MLP for its first
    qkv tile of the next layer (after the last layer, the first layer's, for the next token); they
    arrive while the phase works (_prefetch_l2)."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    D: tl.constexpr = C // H
    PHASES: tl.constexpr = PHASES_PER_LAYER * L + PHASES_PER_TOKEN_EXTRA
    TILES_PER_HEAD: tl.constexpr = (3 * D + SPAN_QKV - 1) // SPAN_QKV
    O_WIDTH: tl.constexpr = (C + O_CHUNKS - 1) // O_CHUNKS
    KV_AHEAD: tl.constexpr = BT >= W_CACHE  # the window is one block: its keys load ahead (_keys_ahead)
    SLOT: tl.constexpr = REPS * NB * C  # a stream slot with its copies (kernels/triton_decode_stream.py)
    t0 = tl.load(T_PTR)
    pos0 = tl.load(POS_PTR)
    WORK = PROF + n_steps * PHASES + 1  # PROFILE: each program's time in each phase, after the stamps
    QKV_WORK = WORK + nprog * PHASES  # PROFILE: and its time in the attn phases' qkv tiles, after those
    since = pos0 * 0  # PROFILE: when this program left the last barrier (globaltimer, ns)
    offs_c = tl.arange(0, CP)
    for b in range(pid, NB, nprog):  # the first input: the token the host (prefill) sampled last
        token = tl.load(OUT + b * TOTAL + t0 - 1)
        x = tl.load(WTE + token * C + offs_c, mask=offs_c < C, other=0.0).to(tl.float32) + \
            tl.load(WPE + pos0 * C + offs_c, mask=offs_c < C, other=0.0).to(tl.float32)
        tl.store(STREAM + b * C + offs_c, x, mask=offs_c < C)
    # this program's first tile of each phase, fixed for the run: its weights can load ahead
    r0, r_end = _tile_rows(pid, 3 * C, 3 * D, SPAN_QKV)
    fc0, fc_end = _tile_rows(pid, 4 * C, 4 * C, SPAN_FC)
    o_head = (pid // O_CHUNKS) % H
    o_row = (pid % O_CHUNKS) * O_WIDTH
    O_ITEMS: tl.constexpr = (1 if SHARED_O else NB) * H * O_CHUNKS  # the projection's items (_attend)
    o_end = tl.where(pid < O_ITEMS, tl.minimum(o_row + O_WIDTH, C), 0)
    # the head's block of W_proj this program projects with: with PACK_O head-major (pack_chunks),
    # head h's (C, D) columns one run, its rows D apart
    WO_LD: tl.constexpr = D if PACK_O else C
    if PACK_O:
        wo_head = W_O + o_head * D * C
        wo_c0 = o_head * 0
    else:
        wo_head = W_O
        wo_c0 = o_head * D
    if SHARED_O:  # the (row, head) of this program's first attention item, or with SPLIT its first run (_attend)
        kv_first = pid
    else:
        kv_first = pid // O_CHUNKS
    for i in range(n_steps):
        t = t0 + i
        pos = pos0 + i
        k = i * PHASES  # barriers passed before this step
        # what a head's YCNT reaches once its rows' outputs are in (_attend): a count a row each step,
        # or with SPLIT the slots attended, pos0 + 1 + i' a row at step i'
        if SPLIT:
            y_target = NB * ((i + 1) * (pos0 + 1) + i * (i + 1) // 2)
        else:
            y_target = (i + 1) * NB
        for layer in range(L):
            kc = KC + layer * NB * H * W_CACHE * D
            vc = VC + layer * NB * H * W_CACHE * D
            x_in = STREAM + 2 * layer * SLOT  # the layer's input slot; the attention adds into the next
            x_mid = x_in + SLOT
            _arrive(BAR, k + layer * PHASES_PER_LAYER + 1, WORK, since, PHASES, PROFILE)
            w = _weights(W_QKV + layer * 3 * C * C, r0, r_end, 0, C, C, BN_QKV, BK_QKV, ONE_QKV or AHEAD or PRE_QKV,
                         PACK_QKV)
            wo = _weights(wo_head + layer * C * C, o_row, o_end, wo_c0, wo_c0 + D, WO_LD, BN_O, BD, ONE_O, False)
            k_old = _keys_ahead(kc, kv_first, pos, NB, H, D, W_CACHE, BT, BD, KV_AHEAD, SPLIT)
            since = _leave(BAR, k + layer * PHASES_PER_LAYER + 1, PROF, since, PROFILE)
            if L2_NEXT:  # this phase's projection chunk, then the MLP's tile
                _prefetch_l2(wo_head + layer * C * C, o_row, o_end, wo_c0, wo_c0 + D, WO_LD, PREFETCH_LINES)
                _prefetch_l2(W_FC + layer * 4 * C * C, fc0, fc_end, 0, C, C, PREFETCH_LINES)
                _prefetch_l2(W_P2T + layer * 4 * C * C, fc0, fc_end, 0, C, C, PREFETCH_LINES)
            fold_ln = FOLD + layer * 14 * C
            _matvec(pid, nprog, w, x_in, x_mid, B_O + layer * C, XS, LN1_W + layer * C, LN1_B + layer * C, eps,
                    W_QKV + layer * 3 * C * C, B_QKV + layer * 3 * C, fold_ln, QKV, kc, vc, CNT + layer * H, pos, NB,
                    3 * C, C, 3 * D, H, W_CACHE, B_PAD, BN_QKV, SPAN_QKV, BK_QKV, ONE_QKV, AHEAD, FOLD_QKV, HAS_BIAS,
                    HAS_LN_B, HAS_BIAS, True, DOT, PREC, STAGES, PRE_QKV, REPS, PACK_QKV)
            if PROFILE:  # the qkv tiles' share of the phase: the rest is the attention and its projection
                tl.atomic_add(QKV_WORK + pid, tl.extra.cuda.globaltimer() - since, sem="relaxed")
            _attend(pid, nprog, wo, QKV, kc, vc, k_old, kv_first, CNT + layer * H, (i + 1) * TILES_PER_HEAD,
                    W_O + layer * C * C, x_mid, Y, CNT + (L + layer) * H, y_target, pos, scale, NB, H, D, W_CACHE,
                    BT, BD, O_CHUNKS, BN_O, ONE_O, SHARED_O, B_PAD, DOT, PREC, KV_AHEAD, PACK_O, SPLIT)
            _arrive(BAR, k + layer * PHASES_PER_LAYER + 2, WORK, since, PHASES, PROFILE)
            w = _weights(W_FC + layer * 4 * C * C, fc0, fc_end, 0, C, C, BN_FC, BK_FC, ONE_FC or AHEAD_FC or PRE_FC,
                         PACK_FC)
            w2 = _weights(W_P2T + layer * 4 * C * C, fc0, fc_end, 0, C, C, BN_FC, BC_FC, ONE_FC or PRE_P2, PACK_FC)
            since = _leave(BAR, k + layer * PHASES_PER_LAYER + 2, PROF, since, PROFILE)
            if L2_NEXT:
                _prefetch_l2(W_QKV + (layer + 1) % L * 3 * C * C, r0, r_end, 0, C, C, PREFETCH_LINES)
            _mlp(pid, nprog, w, w2, x_mid, x_mid + SLOT, B_P2 + layer * C, XS, W_FC + layer * 4 * C * C,
                 B_FC + layer * 4 * C, fold_ln + 6 * C, W_P2T + layer * 4 * C * C, LN2_W + layer * C,
                 LN2_B + layer * C, eps, NB, C, B_PAD_FC, BN_FC, BK_FC, BC_FC, ONE_FC, AHEAD_FC, FOLD_FC, ADD_ONCE,
                 HAS_BIAS, HAS_LN_B, DOT_FC, PREC, STAGES, SPAN_FC, PRE_FC, PRE_P2, REPS, PACK_FC)
        logits = LOGITS + t * NB * V
        _arrive(BAR, k + PHASES - 1, WORK, since, PHASES, PROFILE)
        w = _weights(WTE, pid * BN_V, V, 0, C, C, BN_V, BK_V, ONE_V, False)
        since = _leave(BAR, k + PHASES - 1, PROF, since, PROFILE)
        x_out = STREAM + 2 * L * SLOT  # the last layer's output: nothing folds it further
        _matvec(pid, nprog, w, x_out, x_out, B_O, XS, LNF_W, LNF_B, eps, WTE, WTE, FOLD + L * 14 * C, logits, KC, VC,
                CNT, pos, NB, V, C, V, H, W_CACHE, B_PAD, BN_V, BN_V, BK_V, ONE_V, False, FOLD_V, HAS_BIAS, HAS_LN_B,
                False, False, DOT, PREC, STAGES, False, REPS, False)
        since = _grid_sync(BAR, k + PHASES, PROF, WORK, since, PHASES, PROFILE)
        _sample_embed(pid, nprog, logits, NOISE + t * NB * V, OUT, t, WTE, WPE, STREAM, pos + 1, temperature,
                      top_k, NB, V, C, L, TOTAL, W_CACHE, VP, CP, CH, GREEDY, TOP_K, REPS)
    _grid_sync(BAR, n_steps * PHASES + 1, PROF, WORK, since, PHASES, PROFILE)  # closes the last phase's stamps
    if pid == 0:
        tl.store(T_PTR, t0 + n_steps)
        tl.store(POS_PTR, pos0 + n_steps)
