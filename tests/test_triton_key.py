"""kernels/triton_key.py: Triton's cache key read from disk equals the one Triton computes, is what
Triton's modules then use, covers every file Triton hashes, and is recomputed when one changes."""
import json
import os
import pkgutil
import sysconfig
from pathlib import Path

import pytest

triton = pytest.importorskip("triton")


@pytest.fixture
def key_module(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    from kernels import triton_key
    triton_key.remembered_key.cache_clear()
    yield triton_key
    triton_key.remembered_key.cache_clear()


def test_the_remembered_key_is_tritons_own_and_is_what_triton_uses(key_module, tmp_path):
    import triton.runtime.cache as cache
    real = key_module._original()
    assert key_module.remembered_key() == real  # computed once, then stored beside Triton's cache
    path = key_module.store(key_module._stamp())
    assert path.parent == tmp_path and json.loads(path.read_text()) == {"stamp": key_module._stamp(), "key": real}
    assert cache.triton_key is key_module.remembered_key  # the function Triton's cache key calls


def test_the_stamp_covers_every_file_triton_hashes(key_module):
    """The files Triton's own triton_key() walks, listed here the way it lists them."""
    import triton.runtime.cache as cache
    root = Path(triton.__file__).parent
    walked = {Path(cache.__file__)}
    for part in ("compiler", "backends", "language"):
        for lib in pkgutil.walk_packages([str(root / part)], prefix=f"triton.{part}."):
            walked.add(Path(lib.module_finder.find_spec(lib.name).origin))
    walked.add(root / "_C" / f"libtriton.{sysconfig.get_config_var('EXT_SUFFIX').split('.')[-1]}")
    assert walked <= set(key_module._hashed_files()), walked - set(key_module._hashed_files())


def test_a_stored_key_is_read_while_its_files_are_unchanged_and_recomputed_after(key_module, monkeypatch, tmp_path):
    src = tmp_path / "file_it_hashes.py"
    src.write_text("x = 1\n")
    files = key_module._hashed_files() + [src]
    monkeypatch.setattr(key_module, "_hashed_files", lambda: files)
    stamp = key_module._stamp()
    key_module.store(stamp).write_text(json.dumps({"stamp": stamp, "key": "planted"}))
    assert key_module.remembered_key() == "planted"  # read, not recomputed
    key_module.remembered_key.cache_clear()
    os.utime(src, ns=(src.stat().st_atime_ns, src.stat().st_mtime_ns + 10**9))  # same size, a new mtime
    assert key_module._stamp() != stamp and key_module.remembered_key() == key_module._original()


def test_an_unwritable_store_falls_back_to_tritons_own_key(key_module, monkeypatch, tmp_path):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "a_file" / "below"))
    (tmp_path / "a_file").write_text("not a folder")
    assert key_module.remembered_key() == key_module._original()
