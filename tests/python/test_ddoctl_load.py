"""`ddoctl load KEY PATH...` (issue 16, item 3): preloading into the pool, like `ollama pull`.

ddoctl opens the files itself and passes the descriptors; ddod reads the bytes and ddoctl shows
the progress. A file, a model folder (its *.safetensors sorted, its index checked), the same
load again (warm: nothing read), and what is refused: a missing path, a FIFO, a folder without
weights, no path at all; the attached component holds the file's bytes.
"""

from __future__ import annotations

import json
import os

import torch

from diffusers_dynamic_offloader import DdoClient
from store_support import write_index, write_safetensors
from test_ddoctl_cli import ddoctl


def _tensors(seed: int) -> dict:
    generator = torch.Generator().manual_seed(seed)
    return {f"block.{i}.weight": torch.randn(64, 32, generator=generator) for i in range(3)}


def test_load_a_file_then_again_warm(daemon, short_dir):
    path = write_safetensors(os.path.join(short_dir, "model.safetensors"), _tensors(1))
    done = ddoctl(daemon, "load", "cli/model", path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("loaded 'cli/model': ") and "warm" not in done.stdout
    again = ddoctl(daemon, "--json", "load", "cli/model", path)
    assert again.returncode == 0, again.stderr
    answer = json.loads(again.stdout)
    assert answer["done"] and answer["warm_hit"], answer
    with DdoClient.connect(daemon.address) as client:
        with client.attach("cli/model") as attached:
            assert torch.equal(attached.tensors["block.2.weight"], _tensors(1)["block.2.weight"])


def test_load_a_model_folder_with_its_index(daemon, short_dir):
    folder = os.path.join(short_dir, "transformer")
    os.mkdir(folder)
    first, second = _tensors(2), _tensors(3)
    second = {name.replace("block", "tail"): value for name, value in second.items()}
    write_safetensors(os.path.join(folder, "part-00002.safetensors"), second)
    write_safetensors(os.path.join(folder, "part-00001.safetensors"), first)
    weight_map = {**{name: "part-00001.safetensors" for name in first},
                  **{name: "part-00002.safetensors" for name in second}}
    write_index(os.path.join(folder, "model.safetensors.index.json"), weight_map,
                sum(t.numel() * 4 for t in [*first.values(), *second.values()]))
    with open(os.path.join(folder, ".hidden.safetensors"), "wb") as hidden:
        hidden.write(b"not read")
    done = ddoctl(daemon, "load", "cli/folder", folder)
    assert done.returncode == 0, done.stderr
    with DdoClient.connect(daemon.address) as client:
        component = client.component("cli/folder")
        assert component.tensor_count == 6, component


def test_what_load_refuses(daemon, short_dir):
    fifo = os.path.join(short_dir, "pipe.safetensors")
    os.mkfifo(fifo)
    empty = os.path.join(short_dir, "empty")
    os.mkdir(empty)
    for words, expected in (
            (("load", "cli/x", os.path.join(short_dir, "missing.safetensors")),
             "missing.safetensors"),
            (("load", "cli/x", fifo), "is not a regular file or a folder"),
            (("load", "cli/x", empty), "holds no *.safetensors file"),
            (("load", "cli/x"), "load takes a cache key and one or more")):
        done = ddoctl(daemon, *words)
        assert done.returncode == 2, (words, done.returncode, done.stderr)
        assert expected in done.stderr, (words, done.stderr)
    with DdoClient.connect(daemon.address) as client:
        assert [c.cache_key for c in client.components()] == []


def test_keep_alive_evicts_what_nobody_uses(daemon_factory, short_dir):
    """ddod --keep-alive 1s: a component unused for a second goes; one loaded with
    keep-alive=never stays, and so does one a runner has attached (in use) past its own
    keep-alive (3 s: time enough to attach it after the load, however busy the machine)."""
    import time

    daemon = daemon_factory(os.path.join(short_dir, "ka", "ddod.sock"), "--keep-alive", "1s")
    paths = {name: write_safetensors(os.path.join(short_dir, f"{name}.safetensors"),
                                     _tensors(seed))
             for seed, name in enumerate(("idle", "kept", "used"), start=4)}
    assert ddoctl(daemon, "load", "ka/idle", paths["idle"]).returncode == 0
    assert ddoctl(daemon, "load", "ka/kept", paths["kept"], "keep-alive=never").returncode == 0
    assert ddoctl(daemon, "load", "ka/used", paths["used"], "keep-alive=3s").returncode == 0
    with DdoClient.connect(daemon.address) as client:
        with client.attach("ka/used"):
            attached = time.monotonic()
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                keys = {c.cache_key for c in client.components()}
                if "ka/idle" not in keys:
                    break
                time.sleep(0.2)
            assert keys == {"ka/kept", "ka/used"}, keys
            time.sleep(max(0.0, attached + 4.0 - time.monotonic()))  # past its 3 s, in use
            assert {c.cache_key for c in client.components()} == {"ka/kept", "ka/used"}
        listed = json.loads(ddoctl(daemon, "--json", "components").stdout)
    by_key = {entry["ref"]["cache_key"]: entry for entry in listed["components"]}
    assert by_key["ka/kept"]["keep_alive_seconds"] == -1
    assert by_key["ka/used"]["keep_alive_seconds"] == 3
    assert "evicted 'ka/idle' after" in daemon.log()
    bad = ddoctl(daemon, "load", "ka/x", paths["idle"], "keep-alive=soon")
    assert bad.returncode == 2 and "keep-alive takes a duration" in bad.stderr, bad.stderr


def test_the_python_client_sets_a_keep_alive(daemon, short_dir):
    import pytest
    from diffusers_dynamic_offloader import ConfigurationError

    path = write_safetensors(os.path.join(short_dir, "py.safetensors"), _tensors(9))
    with DdoClient.connect(daemon.address) as client:
        client.load_safetensors("py/kept", path, keep_alive="never", progress=False)
        client.load_safetensors("py/hour", path, keep_alive=3600, progress=False)
        with pytest.raises(ConfigurationError, match="keep_alive=0.5"):
            client.load_safetensors("py/bad", path, keep_alive=0.5, progress=False)
        keep = {c.cache_key: c for c in client.components()}
    listed = json.loads(ddoctl(daemon, "--json", "components").stdout)
    seconds = {e["ref"]["cache_key"]: e["keep_alive_seconds"] for e in listed["components"]}
    assert seconds == {"py/kept": -1, "py/hour": 3600}, (seconds, list(keep))
