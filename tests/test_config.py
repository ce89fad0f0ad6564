"""Every option of every config group composes; bad values fail at compose time naming the field."""

import pytest
from conftest import ROOT, make_cfg
from hydra.errors import ConfigCompositionException, MissingConfigException
from omegaconf import OmegaConf

from transformerop.decode import PATHS
from transformerop.model import BACKENDS
from transformerop.tasks import TASKS

# option groups from registries (config.register stores one option per entry), then the yaml ones
REGISTERED = {"attention": list(BACKENDS), "decode": list(PATHS), "task": list(TASKS)}
GROUPS = sorted(set(REGISTERED) | {p.name for p in (ROOT / "conf").iterdir() if p.is_dir() and p.name != "experiment"})


def options(group):
    return REGISTERED.get(group) or sorted(p.stem for p in (ROOT / "conf" / group).glob("*.yaml"))


@pytest.mark.parametrize("group,option", [(g, o) for g in GROUPS for o in options(g)])
def test_every_option_composes(group, option):
    cfg = make_cfg(f"{group}={option}")
    assert OmegaConf.to_container(cfg, resolve=True)


def test_experiment_files_compose():
    for path in sorted((ROOT / "experiments").glob("*.yaml")):
        assert path.read_text().startswith("# @package _global_"), path.name
        cfg = make_cfg(f"experiment={path.stem}")
        assert cfg.study.name == path.stem


def test_defaults_follow_the_data_set():
    assert make_cfg().model.n_embd == 64 and make_cfg().train.batch_size == 128
    shakespeare = make_cfg("data=shakespeare")
    assert (shakespeare.model.n_layer, shakespeare.model.n_embd, shakespeare.train.max_iters) == (6, 384, 5000)
    bigram = make_cfg("data=shakespeare", "model=bigram")
    assert bigram.model.name == "bigram" and bigram.train.lr == 1e-2 and bigram.train.max_iters == 5000
    assert make_cfg("data=shakespeare", "model=bigram", "train=shakespeare").train.lr == 1e-3  # CLI wins


@pytest.mark.parametrize("override,field", [("model.n_layer=abc", "model.n_layer"), ("train.lr=fast", "train.lr"),
                                            ("model.nope=1", "model.nope"), ("train.dtype=[1]", "train.dtype"),
                                            ("train.dtype=float16", "train.dtype"),
                                            ("attention.name=bogus", "attention.name"),
                                            ("decode.name=bogus", "decode.name"),
                                            ("bench.target=nope", "bench.target")])
def test_bad_values_fail_at_compose(override, field):
    with pytest.raises(ConfigCompositionException) as e:
        make_cfg(override)
    text = str(e.value) + str(e.value.__cause__)
    assert field in text


def test_unknown_option_fails():
    with pytest.raises(MissingConfigException, match="model/nope"):
        make_cfg("model=nope")
