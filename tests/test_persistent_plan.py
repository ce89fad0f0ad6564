"""decode=persistent's plan (decode/persistent_plan.py): every tile fits the register budget and
the shared memory, covers every output, and takes the forms measured fastest on the H200 at the
rows the decode_speed study runs."""
import itertools


def test_plan_fits_the_register_budget_and_covers_every_output():
    import triton

    from transformerop.decode.persistent_plan import REGISTERS_PER_THREAD, SHARE_BYTES, SHARED_MEMORY, plan
    shapes = ((384, 6, 256, 1), (384, 6, 256, 8), (768, 12, 512, 4), (1152, 18, 256, 8), (96, 4, 64, 2),
              (1152, 18, 256, 1))
    for (C, H, W, batch), cost, proj, elem in itertools.product(shapes, ("rounds", "bytes"), ("row", "head", "auto"),
                                                                (2, 4)):
        t = plan(C, H, 65, W, batch, 132, cost=cost, proj=proj, elem=elem)
        budget = REGISTERS_PER_THREAD * 32 * t["num_warps"]
        D = C // H
        for name, tiles, N, K in (("QKV", H * -(-3 * D // t["SPAN_QKV"]), 3 * D, C),
                                  ("FC", -(-4 * C // t["SPAN_FC"]), 4 * C, C), ("V", -(-65 // t["BN_V"]), 65, C)):
            assert t.get(f"SPAN_{name}", t[f"BN_{name}"]) <= t[f"BN_{name}"]  # a tile's rows fit it
            rows = 1 if t["DOT"] else t["B_PAD"]  # the tensor cores' products are not held per row
            assert rows * t[f"BN_{name}"] * t[f"BK_{name}"] <= budget, (C, batch, name)
            assert not t["DOT"] or t[f"BN_{name}"] >= 16  # a dot's smallest tile
            assert t[f"BN_{name}"] <= triton.next_power_of_2(N)  # no tile wider than its group (a head's q, k, v)
            # a phase that loads its one tile ahead really has one tile per program and one chunk
            assert not t[f"ONE_{name}"] or (tiles <= 132 and t[f"BK_{name}"] >= K)
        # attention: k and v blocks (as loaded: 16-bit ones pack two to a register) and a projection
        # block fit the budget (half of it for a
        # dot that holds the rows' inputs too, and 16 rows at least); a block loaded ahead (held
        # through the qkv phase) is a quarter of it and the only item of its program, and covers its
        # whole chunk of outputs
        shared_dot = t["SHARED_O"] and t["DOT"]
        saved = (batch - 1) * C * C * elem  # W_proj bytes a layer that sharing reads once instead of per row
        assert t["SHARED_O"] == (proj == "head" or (proj == "auto" and saved >= SHARE_BYTES))
        kv_regs = elem / 2
        assert kv_regs * t["BT"] * t["BD"] <= budget and t["BN_O"] * t["BD"] <= budget // (2 if shared_dot else 1)
        assert not shared_dot or t["BN_O"] >= 16
        items = (1 if t["SHARED_O"] else batch) * H * t["O_CHUNKS"]
        assert not t["ONE_O"] or (items <= 132 and 4 * t["BN_O"] * t["BD"] <= budget
                                  and t["BN_O"] >= -(-C // t["O_CHUNKS"]))
        assert t["O_CHUNKS"] == 1 or items <= 132  # chunks only for programs that would idle
        # pipelined weight chunks: two loops' worth fit the shared memory, and the MLP's loop is at
        # least twice as long as the pipeline
        chunk = max(t["BN_QKV"] * t["BK_QKV"], t["BN_FC"] * t["BK_FC"], t["BN_V"] * t["BK_V"]) * elem
        assert 1 <= t["STAGES"] <= 3 and 2 * t["STAGES"] * chunk <= SHARED_MEMORY and (elem == 2 or t["STAGES"] == 1)
        assert t["STAGES"] == 1 or -(-C // t["BK_FC"]) > t["STAGES"]  # a pipeline shallower than the MLP's loop
        assert t["AHEAD"] == (not t["DOT"])  # chunks one ahead on the multiply-add form alone
        for name in ("QKV", "FC", "V"):  # a LayerNorm folded past the products of a phase of several rounds
            assert (t[f"FOLD_{name}"] == 0) == t[f"ONE_{name}"]
            slot = (name == "QKV" and not t["DOT"]) or \
                (name == "FC" and t["STAGES"] > 1 and -(-C // t["BK_FC"]) >= 2 * t["STAGES"])  # SLOT where it measured faster
            assert t[f"ONE_{name}"] or t[f"FOLD_{name}"] == (2 if slot else 1)
    # the rows measured on the H200: sharing the projection won at 1152 wide, batch 4 and 8, and
    # 768 wide, batch 8; lost at 768 wide, batch 4, and 384 wide, batch 8. Pipelining three deep won
    # at 1152 wide, batch 4 and 8 (nine chunks a tile), and lost at 768 wide, batch 8 (three), where
    # two deep won; the 768-wide MLP keeps COPY (measured so), the 1152-wide one reads the slot
    for C, H, batch, shared, stages, fold_fc in ((1152, 18, 4, True, 3, 2), (1152, 18, 8, True, 3, 2),
                                                 (768, 12, 8, True, 2, 1), (768, 12, 4, False, 2, 1),
                                                 (384, 6, 8, False, 1, 0), (1152, 18, 1, False, 3, 2)):
        t = plan(C, H, 65, 256, batch, 132)
        assert (t["SHARED_O"], t["STAGES"], t["FOLD_FC"]) == (shared, stages, fold_fc), (C, batch)
    assert plan(384, 6, 65, 256, 1, 132)["BT"] == 256  # batch 1, bf16: the whole window in one block
    # the tensor-core qkv loop in chunks of 128 where it takes several rounds (768 and 1152 wide,
    # batch 4 and 8); one round stays one (384 wide: loaded at the barrier); the multiply-adds keep theirs
    for C, H, batch, bk, one in ((768, 12, 8, 128, False), (1152, 18, 4, 128, False), (384, 6, 8, 512, True),
                                 (1152, 18, 1, 512, False), (768, 12, 1, 1024, False)):
        t = plan(C, H, 65, 256, batch, 132)
        assert (t["BK_QKV"], t["ONE_QKV"]) == (bk, one), (C, batch)
    assert plan(768, 12, 65, 256, 8, 132, by_hand={"BK_QKV": 256})["BK_QKV"] == 256  # by hand: as given
    assert plan(768, 12, 65, 256, 8, 132, elem=4)["BK_QKV"] == 256  # fp32 weights: not pipelined, not measured
    # counting the stream's rereads widens the 1152-wide MLP's tensor-core tiles (one a program,
    # not three); the multiply-add form (batch 1) keeps its tiles
    rounds, by_bytes = plan(1152, 18, 65, 256, 8, 132, cost="rounds"), plan(1152, 18, 65, 256, 8, 132)
    assert (rounds["BN_FC"], by_bytes["BN_FC"]) == (16, 64)
    # spans (a tile's rows, masked within its BN): the multiply-add form's qkv tiles at 1152 wide,
    # batch 1 (108 tiles of 32 on 132 programs: 126 of 28); whole tiles on the tensor cores
    # (768 wide, batch 1: its qkv tiles of 16 rows take no span of 18; 384 wide: one round, loaded at the barrier)
    for C, H, batch, spans in ((1152, 18, 1, (28, 64)), (1152, 18, 8, (32, 64)), (768, 12, 4, (32, 32)),
                               (768, 12, 1, (16, 16)), (384, 6, 1, (16, 16))):
        t = plan(C, H, 65, 256, batch, 132)
        assert (t["SPAN_QKV"], t["SPAN_FC"]) == spans, (C, batch)
    # the MLP on the tensor cores at batch 1 where the multiply-adds take more than two rounds
    # (1152 wide: five), in one tile of 64 x 128 a program, pipelined three deep; not at 768 (two)
    t = plan(1152, 18, 65, 256, 1, 132)
    assert (t["DOT"], t["DOT_FC"], t["BN_FC"], t["BK_FC"], t["STAGES"]) == (False, True, 64, 128, 3)
    assert not plan(768, 12, 65, 256, 1, 132)["DOT_FC"]
    fma = {"DOT_FC": False}
    assert plan(1152, 18, 65, 256, 1, 132, cost="rounds", by_hand=fma) == plan(1152, 18, 65, 256, 1, 132, by_hand=fma)
    # decode.fold_ln=false: every LayerNorm before its products; decode.add_once: only where the
    # batch-1 MLP's one output chunk covers C and a program may have several tiles
    assert all(plan(1152, 18, 65, 256, b, 132, fold=False)[f"FOLD_{n}"] == 0 for b in (1, 8) for n in ("QKV", "FC", "V"))
    assert not plan(1152, 18, 65, 256, 1, 132)["ADD_ONCE"]
    assert [plan(C, H, 65, 256, b, 132, add_once=True)["ADD_ONCE"]
            for C, H, b in ((1152, 18, 1), (768, 12, 1), (1152, 18, 8), (384, 6, 1), (1536, 12, 1))] == \
        [False, True, False, False, False]  # 1152 and 1536 wide: the MLP on the tensor cores; 384: one tile (ONE)


def test_the_stream_slot_copies_where_they_measured_faster():
    """Four copies of the MLP's slot at batch 1 where the MLP is one round over the whole row (384
    wide: 1.04x on the H200), one elsewhere (768 and 1152 wide at batch 1, every width at batch
    4 and 8: 0.83-1.00x with copies); by hand as given."""
    from transformerop.decode.persistent_plan import plan
    for C, H, batch, reps in ((384, 6, 1, 4), (384, 6, 4, 1), (384, 6, 8, 1), (768, 12, 1, 1), (1152, 18, 1, 1),
                              (1152, 18, 8, 1)):
        assert plan(C, H, 65, 256, batch, 132)["REPS"] == reps, (C, batch)
    assert plan(1152, 18, 65, 256, 1, 132, by_hand={"REPS": 8})["REPS"] == 8
