import hashlib

import pytest
import torch
from conftest import make_cfg, needs_shakespeare

from transformerop.data import AdditionData, CharTokenizer, DataError, ShakespeareData
from transformerop.data.addition import format_sum, split
from transformerop.data.shakespeare import fetch


def test_tokenizer_round_trip_and_unknown_char():
    tok = CharTokenizer("hello world")
    assert tok.chars == " dehlorw"
    assert tok.decode(tok.encode("low hello")) == "low hello"
    assert tok.encode("he") == [3, 2]
    with pytest.raises(ValueError, match="'z' is not in the vocabulary"):
        tok.encode("zebra")


def test_vectorized_encode_is_encode():
    from pathlib import Path
    text = (Path(__file__).parents[1] / "transformerop" / "data" / "sample_play.txt").read_text() + "é中"
    tok = CharTokenizer(text)
    assert tok.encode_tensor(text).tolist() == tok.encode(text)
    for unknown in ("z", "ü", "😀"):  # below, inside and past the table's code points
        with pytest.raises(ValueError, match=f"{unknown!r} is not in the vocabulary"):
            CharTokenizer("abé").encode_tensor("ab" + unknown)


def test_addition_split_disjoint_deterministic_and_complete():
    train, test = split(2, 1000, seed=2)
    assert len(test) == 1000 and len(train) == 9000
    as_set = lambda p: {tuple(x) for x in p.tolist()}
    assert not as_set(train) & as_set(test)
    assert len(as_set(train) | as_set(test)) == 10_000
    train2, test2 = split(2, 1000, seed=2)
    assert torch.equal(test, test2) and torch.equal(train, train2)
    _, test3 = split(2, 1000, seed=3)
    assert not torch.equal(test, test3)


def test_addition_format_and_loss_mask():
    assert format_sum(37, 48, 2) == "37+48=085"
    data = AdditionData(make_cfg().data, block_size=16, device=torch.device("cpu"))
    x, y = data.batch("train", 4)
    assert x.shape == (4, 8)
    assert (y[:, :5] == -1).all() and (y[:, 5:] >= 0).all()  # loss only on the 3 answer digits
    s = data.tokenizer.decode(torch.cat([x[0], y[0, -1:]]))
    a, b, c = int(s[0:2]), int(s[3:5]), int(s[6:9])
    assert a + b == c
    held = {format_sum(int(a), int(b), 2) for a, b in data.test_pairs.tolist()}
    train_strings = {data.tokenizer.decode(r) for r in data.splits["train"]}
    assert not held & train_strings


def test_shakespeare_corrupt_file_is_refused(tmp_path):
    cfg = make_cfg("data=shakespeare", f"data.cache_dir={tmp_path}").data
    (tmp_path / "tinyshakespeare.txt").write_text("not shakespeare")
    with pytest.raises(DataError, match="is corrupt: sha256"):
        fetch(cfg)


def test_shakespeare_offline_error_names_the_path(tmp_path):
    cfg = make_cfg("data=shakespeare", f"data.cache_dir={tmp_path}", "data.url=file:///nonexistent/input.txt").data
    with pytest.raises(DataError) as e:
        fetch(cfg)
    assert str(tmp_path / "tinyshakespeare.txt") in str(e.value)
    assert not (tmp_path / "tinyshakespeare.part").exists()


def test_shakespeare_download_verifies_checksum(tmp_path):
    src = tmp_path / "src.txt"
    src.write_text("abc")
    good = hashlib.sha256(b"abc").hexdigest()
    cache = tmp_path / "cache"
    cache.mkdir()
    cfg = make_cfg("data=shakespeare", f"data.cache_dir={cache}", f"data.url=file://{src}", f"data.sha256={good}").data
    assert fetch(cfg).read_text() == "abc"
    bad = make_cfg("data=shakespeare", f"data.cache_dir={tmp_path / 'other'}", f"data.url=file://{src}",
                   f"data.sha256={good}").data
    with pytest.raises(DataError, match="does not exist"):  # a cache dir that is not there is named, not made
        fetch(bad)
    assert not (tmp_path / "other").exists()
    wrong = make_cfg("data=shakespeare", f"data.cache_dir={cache}", "data.file=x.txt", f"data.url=file://{src}",
                     f"data.sha256={'0' * 64}").data
    with pytest.raises(DataError, match="download from"):  # checked before it is moved into place
        fetch(wrong)
    assert not (cache / "x.txt").exists()


@needs_shakespeare
def test_shakespeare_split_and_device_batches():
    data = ShakespeareData(make_cfg("data=shakespeare").data, block_size=32, device=torch.device("cpu"))
    assert data.tokenizer.vocab_size == 65
    n_train, n_val = len(data.splits["train"]), len(data.splits["val"])
    assert n_train + n_val == 1_115_394 and n_train == int(0.9 * 1_115_394)
    x, y = data.batch("train", 3)
    assert x.shape == y.shape == (3, 32) and torch.equal(x[:, 1:], y[:, :-1])


def test_sample_play_is_shipped_and_the_whole_split_is_scored_once():
    """The fixture loads through the same loader; eval_batches scores every target of a split once."""
    from conftest import SAMPLE
    cfg = make_cfg(*SAMPLE)
    data = ShakespeareData(cfg.data, block_size=32, device=torch.device("cpu"))
    assert data.tokenizer.vocab_size > 40
    for name in ("train", "val"):
        n = len(data.splits[name])
        scored = sum(int((y >= 0).sum()) for _, y in data.eval_batches(name, 7))
        assert scored == n - 1  # every character after the first, once
        last_x, last_y = list(data.eval_batches(name, 10**9))[0]
        assert torch.equal(last_y[-1][-1:], data.splits[name][-1:])  # the tail window ends at the split's end
