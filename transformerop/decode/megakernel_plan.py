"""the megakernel's schedule, from the shape: which CTA does which tile of each phase, and the
weight stream each CTA's bulk copies bring into shared memory (kernels/megakernel.cu).

Every phase spreads its work over the grid, one tile a CTA where there are enough:
  qkv    tq tiles a head (a head's q, k and v rows: its attention waits on that head alone)
  att    (row, head, split) items: a split of the cache's slots each, as many splits as leave
         no CTA idle (flash-decoding); proj combines the splits' partial softmaxes
  proj   rows of W_o, every batch row at once
         (fused, at batch 1: an item per head over the whole cache, which multiplies its output
         by its head's columns of W_o itself -- no proj tiles, one hand-over fewer a layer)
  fc     hidden units: rows of W_fc and the same rows of W_proj2's transpose
  head   rows of wte (the tied LM head)
Tiles are the same for every layer, so the stream of one CTA is, layer after layer, its tiles'
weight rows in the order the kernel uses them, then its head rows. A tile's rows are cut into
blocks of at most 256 rows. The products read a block chunk-major (8 elements of row r, then the
same 8 of row r + 1: neighbouring threads read neighbouring 16 bytes); W_proj2's rows, summed
into by a thread per 8 columns, stay row-major.

Where every CTA's stream fits the ring that shared memory leaves, it is loaded once a launch
and stays (resident); else the ring is cut into slots of `stage` bytes, the stream into packets
of that size -- no block straddles two -- and the CTA copies packet after packet into the
next free slot, step after step."""
import math
from dataclasses import dataclass, field

import torch

THREADS = 256  # the threads of a CTA (kernels/megakernel.cu: kConsumers)
MAX_ROWS = 256  # rows of a block: one thread each at most
MAX_BATCH = 8
MAX_ROW = 8192  # a row of logits (vocabulary) or of scores (block_size) held in shared memory
STAGE = 32 << 10  # a streaming slot's bytes, where shared memory leaves room for four
MAX_SLOTS = 16
CTA_RECORD = 20  # ints per CTA (kernels/megakernel.h: kCtaRecord)
STATS = 2 * 8 * MAX_BATCH  # floats of load_norm's row sums (kernels/megakernel_phases.cuh: kStats)
QKV, ATT, PROJ, FC, HEAD = 4, 6, 8, 10, 12  # the record's (first, count) fields for each kind of tile


def pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


@dataclass
class Plan:
    C: int
    H: int
    L: int
    V: int
    W: int
    B: int
    grid: int
    elem: int
    nb: int = 0  # the batch rows the kernel computes: B rounded up to a power of two
    tq: int = 0  # qkv tiles a head
    splits: int = 0
    split_len: int = 0
    rf: int = 0  # hidden units of an fc tile (at most)
    fused: bool = False  # the attention items do the projection (batch 1)
    bias_rows: int = 0  # the most rows of biases a CTA's tiles of one phase take
    reps: int = 1  # copies of a stream slot the MLP's CTAs add into by turns (kernels/megakernel.cu: reps_for)
    sched: int = 0  # bytes of shared memory for a CTA's copy of its record, tiles and blocks
    n_att: int = 0
    n_head_tiles: int = 0
    scratch: int = 0  # floats
    resident: bool = False  # every CTA's stream stays in its ring
    resident_share: float = 0.0  # the share of CTAs whose stream does
    ring: int = 0  # bytes of shared memory for the ring
    stage: int = 0  # a streamed CTA's slot
    slots: int = 0
    smem: int = 0
    tiles: dict = field(default_factory=dict)  # kind -> [(cta, (a, b, c, d))]
    cta: list = field(default_factory=list)  # grid x CTA_RECORD ints
    tile_list: list = field(default_factory=list)  # int4s
    blocks: list = field(default_factory=list)  # int4s: packet, offset, rows, first row in the tile
    sources: list = field(default_factory=list)  # per block: (matrix, layer, first row, rows, chunk-major)
    stream_bytes: list = field(default_factory=list)  # per CTA, packed as laid out
    packed_bytes: int = 0


def shape_error(C: int, H: int, V: int, W: int, B: int) -> str | None:
    """What this kernel cannot take, as one line, or None."""
    D = C // H if H else 0
    if not 1 <= B <= MAX_BATCH:
        return f"generate.batch_size={B}: the megakernel computes 1 to {MAX_BATCH} rows a step"
    if C % 8 or D % 8:
        return (f"model.n_embd={C} with {H} heads: the megakernel reads 8 elements at once, so n_embd and "
                f"the head dim ({D}) must be multiples of 8")
    if C > 8 * THREADS:
        return f"model.n_embd={C}: the megakernel's MLP gives each thread 8 columns, so n_embd <= {8 * THREADS}"
    if D > THREADS or (D // 8) & (D // 8 - 1):
        return (f"model.n_embd / n_head = {D}: the megakernel takes head dims of 8 times a power of two, "
                f"up to {THREADS}")
    if V > MAX_ROW or W > MAX_ROW:
        return f"vocabulary {V} / block_size {W}: the megakernel holds a row of either in shared memory (<= {MAX_ROW})"
    return None


def plan(C: int, H: int, L: int, V: int, W: int, B: int, grid: int, elem: int, smem_limit: int,
         fused: bool | None = None) -> Plan:
    """The schedule for a (C, H, L, V, W) GPT at batch B on `grid` CTAs with weights of `elem`
    bytes and `smem_limit` bytes of shared memory a CTA; fused: the projection in the attention
    items (None: at batch 1). ValueError (one line) if it cannot fit."""
    error = shape_error(C, H, V, W, B)
    if error:
        raise ValueError(error)
    p = Plan(C, H, L, V, W, B, grid, elem)
    D = C // H
    p.nb = pow2(B)
    p.reps = max(1, 8 // p.nb)
    rq = math.ceil(3 * D / max(1, grid // H))
    p.tq = math.ceil(3 * D / rq)
    p.fused = B == 1 if fused is None else fused
    p.splits = 1 if p.fused else max(1, min(grid // (B * H), math.ceil(W / 32), 8))
    p.split_len = math.ceil(W / p.splits)
    ro, p.rf, rv = math.ceil(C / grid), math.ceil(4 * C / grid), math.ceil(V / grid)

    def spread(items, top=False):  # item i to CTA i mod grid, from the last CTA down with top
        return [((grid - 1 - i % grid) if top else i % grid, item) for i, item in enumerate(items)]

    p.tiles = {
        QKV: spread([(h, r, min(rq, 3 * D - r), 0) for h in range(H) for r in range(0, 3 * D, rq)]),
        ATT: spread([(b, h, s, 0) for b in range(B) for h in range(H) for s in range(p.splits)], top=True),
        PROJ: [] if p.fused else spread([(r, min(ro, C - r), 0, 0) for r in range(0, C, ro)]),
        FC: spread([(j, min(p.rf, 4 * C - j), 0, 0) for j in range(0, 4 * C, p.rf)]),
        HEAD: spread([(v, min(rv, V - v), 0, 0) for v in range(0, V, rv)], top=True),
    }
    p.n_att, p.n_head_tiles = len(p.tiles[ATT]), len(p.tiles[HEAD])
    rows = [[0, 0] for _ in range(grid)]  # per CTA: its qkv and proj rows, its fc rows
    for kind, phase, count in ((QKV, 0, 2), (PROJ, 0, 1), (FC, 1, 1)):
        for cta, tile in p.tiles[kind]:
            rows[cta][phase] += tile[count]
    p.bias_rows = max(max(r) for r in rows)
    # the block products' sums, load_norm's staged vectors, an attention item, the combine's
    # weights, the sampled rows (kernels/megakernel_phases.cuh), then a flag
    p.scratch = 32 * math.ceil(max(THREADS * p.nb, 3 * C, p.split_len + 8 * D + 16, 2 * B * H * p.splits,
                                   2 * B * V) / 32)
    # every layer's biases of a CTA's tiles (2L phases), the block products' sums, load_norm's
    # staged vectors, an attention item, the combine's weights, the sampled rows
    fixed = 4 * (2 * p.nb * C + p.nb * p.rf + 2 * L * p.bias_rows + STATS + p.scratch + 32)
    while True:  # the schedule's copy depends on the blocks, which depend on the ring it shrinks
        p.ring = (smem_limit - fixed - p.sched - 16 * MAX_SLOTS - 256) // 128 * 128
        p.stage = STAGE if p.ring >= 4 * STAGE else p.ring // 4 // 16 * 16
        p.slots = min(MAX_SLOTS, p.ring // max(1, p.stage))
        if p.stage < C * elem or p.slots < 2:
            raise ValueError(f"model.n_embd={C} at batch {B}: the megakernel's weight ring needs two slots of at "
                             f"least one weight row ({C * elem} bytes); {p.ring} bytes of shared memory are left")
        _lay_out(p)
        need = 16 + 4 * CTA_RECORD + 16 * max(r[HEAD] + r[HEAD + 1] - r[QKV] + r[14] for r in p.cta)
        if need <= p.sched:
            break
        p.sched = need
    p.smem = p.ring + 16 * MAX_SLOTS + fixed + p.sched
    return p


def _walk(p: Plan, cta: int):
    """CTA cta's weight rows in the order its kernel reads them: (matrix, layer, first row, rows,
    chunk-major, row length) per tile, layer after layer, then the head's."""
    C, D = p.C, p.C // p.H
    mine = {kind: [t for c, t in p.tiles[kind] if c == cta] for kind in p.tiles}
    for layer in range(p.L):
        for h, r, n, _ in mine[QKV]:
            yield "W_QKV", layer, h * 3 * D + r, n, True, C
        if p.fused:  # head h's columns of W_o, C rows of D
            for _, h, *_ in mine[ATT]:
                yield "W_O_HEADS", layer, h * C, C, True, D
        for r, n, *_ in mine[PROJ]:
            yield "W_O", layer, r, n, True, C
        for j, n, *_ in mine[FC]:
            yield "W_FC", layer, j, n, True, C
            yield "W_P2T", layer, j, n, False, C
    for v, n, *_ in mine[HEAD]:
        yield "WTE", None, v, n, True, C


def _lay_out(p: Plan) -> None:
    """The blocks of every CTA's stream: where each lies (packet, offset), its rows and source;
    the CTA records and the tile list the kernel reads (laid out afresh on every call)."""
    p.blocks, p.sources, p.cta, p.tile_list, p.stream_bytes = [], [], [], [], []
    source = 0  # where this CTA's stream starts in the packed buffer, bytes
    resident = 0
    for cta in range(p.grid):
        contiguous = sum(rows * K * p.elem for _, _, _, rows, _, K in _walk(p, cta))
        stage, slots = (max(16, contiguous), 1) if contiguous <= p.ring else (p.stage, p.slots)
        resident += slots == 1
        record = [0] * CTA_RECORD
        record[15:18] = [int(slots == 1), stage, slots]
        record[0] = len(p.blocks)
        for kind in (QKV, ATT, PROJ, FC, HEAD):
            mine = [t for c, t in p.tiles[kind] if c == cta]
            record[kind], record[kind + 1] = len(p.tile_list), len(mine)
            p.tile_list += mine
        cursor = 0
        for matrix, layer, first, rows, chunked, K in _walk(p, cta):
            row_bytes = K * p.elem
            done = 0
            while done < rows:
                room = (stage - cursor % stage) // row_bytes
                if room == 0:  # the packet is full: the next block starts the next one
                    cursor = -(-cursor // stage) * stage
                    room = stage // row_bytes
                n = min(rows - done, room, MAX_ROWS)
                p.blocks.append((cursor // stage, cursor % stage, n, done))
                p.sources.append((matrix, layer, first + done, n, chunked, K))
                cursor += n * row_bytes
                done += n
        packets = -(-cursor // stage)
        record[1], record[2] = packets, source // 16
        record[3] = cursor - (packets - 1) * stage if packets else 0
        record[14] = len(p.blocks) - record[0]
        p.cta.append(record)
        p.stream_bytes.append(cursor)
        source += packets * stage
    p.packed_bytes = source
    p.resident, p.resident_share = resident == p.grid, resident / p.grid


def pack(p: Plan, weights: dict) -> torch.Tensor:
    """Every CTA's weight stream as one uint8 tensor on the weights' device: each block's rows of
    its matrix (weights[name][layer] or weights[name]), chunk-major where the plan says so."""
    some = weights["WTE"]
    packed = torch.zeros(max(16, p.packed_bytes), dtype=torch.uint8, device=some.device)
    for record in p.cta:
        start = record[2] * 16
        for i in range(record[0], record[0] + record[14]):
            packet, offset, rows, _ = p.blocks[i]
            matrix, layer, first, n, chunked, K = p.sources[i]
            m = weights[matrix] if layer is None else weights[matrix][layer]
            block = m[first:first + n]
            if chunked:  # (rows, K) -> (K / 8, rows, 8)
                block = block.reshape(n, K // 8, 8).transpose(0, 1)
            data = block.contiguous().view(torch.uint8).reshape(-1)
            at = start + packet * record[16] + offset
            packed[at:at + data.numel()] = data
    return packed


def tensors(p: Plan, device) -> dict:
    """The schedule as the kernel reads it: int32 tensors on device."""
    def ints(rows, width):
        return torch.tensor(rows or [[0] * width], dtype=torch.int32, device=device).reshape(-1)
    return {"cta": ints(p.cta, CTA_RECORD), "blocks": ints(p.blocks, 4), "tiles": ints(p.tile_list, 4)}
