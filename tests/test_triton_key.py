"""kernels/triton_key.py: Triton's cache key read from disk equals the one Triton computes, is what
Triton's modules then use, and is recomputed when a file it hashes changes."""
import json

import pytest

triton = pytest.importorskip("triton")


@pytest.fixture
def key_module(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    from kernels import triton_key
    triton_key.remembered_key.cache_clear()
    yield triton_key
    triton_key.remembered_key.cache_clear()


def test_the_remembered_key_is_tritons_own_and_is_what_triton_uses(key_module):
    import triton.runtime.cache as cache
    real = key_module._original()
    assert key_module.remembered_key() == real  # computed once, then stored
    saved = json.loads(key_module.store().read_text())
    assert saved["key"] == real and saved["stamp"] == key_module._stamp()
    assert cache.triton_key is key_module.remembered_key  # the function Triton's cache key calls


def test_a_stored_key_is_read_while_its_files_are_unchanged_and_recomputed_after(key_module, monkeypatch):
    path = key_module.store()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"stamp": key_module._stamp(), "key": "planted"}))
    assert key_module.remembered_key() == "planted"  # read, not recomputed
    key_module.remembered_key.cache_clear()
    files = key_module._hashed_files()
    assert any(p.name.startswith("libtriton") for p in files) and len(files) > 10
    monkeypatch.setattr(key_module, "_hashed_files", lambda: files[:-1])  # as if a file it hashes changed
    assert key_module.remembered_key() == key_module._original()
    assert json.loads(path.read_text())["key"] != "planted"
