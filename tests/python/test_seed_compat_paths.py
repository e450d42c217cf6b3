"""The seed's API lives in ``diffusers_dynamic_offloader.seed_compat``; its old module paths and
the package root still give the same objects."""

import importlib
import subprocess
import sys

import pytest

import diffusers_dynamic_offloader as ddo

MOVED = ("offload_api", "offload_settings", "offload_hook", "offload_state", "plan_tools",
         "event_payload", "presets", "profiles", "named_profiles", "phases", "loading", "staged")


@pytest.mark.parametrize("name", MOVED)
def test_an_old_path_is_the_moved_module(name):
    old = importlib.import_module(f"diffusers_dynamic_offloader.{name}")
    new = importlib.import_module(f"diffusers_dynamic_offloader.seed_compat.{name}")
    assert old is new
    assert getattr(ddo, name) is new


def test_the_root_exports_the_seed_api_from_its_new_place():
    from diffusers_dynamic_offloader.offload_api import enable_offload
    from diffusers_dynamic_offloader.profiles import DynamicOffloadProfileSession
    from diffusers_dynamic_offloader.seed_compat import offload_api, profiles

    assert ddo.enable_offload is enable_offload is offload_api.enable_offload
    assert ddo.DynamicOffloadProfileSession is DynamicOffloadProfileSession
    assert DynamicOffloadProfileSession is profiles.DynamicOffloadProfileSession
    for name in ddo.__all__:
        assert getattr(ddo, name) is not None, name


def test_an_old_path_imported_first_in_a_fresh_process():
    # Old path before new, and a module's private names through the old path (tests and runners
    # patch them): one module object either way.
    code = ("import diffusers_dynamic_offloader.presets as old\n"
            "from diffusers_dynamic_offloader.seed_compat import presets as new\n"
            "from diffusers_dynamic_offloader.offload_api import enable_offload\n"
            "import diffusers_dynamic_offloader as ddo\n"
            "assert old is new and old._load_ddo_presets is new._load_ddo_presets\n"
            "assert ddo.enable_offload is enable_offload\n"
            "assert enable_offload.__module__ == 'diffusers_dynamic_offloader.seed_compat.offload_api'\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_seeds_own_module_path_has_its_api():
    # The seed defined its API in diffusers_dynamic_offloader.dynamic_offload.
    from diffusers_dynamic_offloader import dynamic_offload

    assert dynamic_offload is importlib.import_module(
        "diffusers_dynamic_offloader.seed_compat.dynamic_offload")
    for name in dynamic_offload.__all__:
        if name != "DDO_PRESETS":  # read from ddod on first access
            assert getattr(dynamic_offload, name) is getattr(ddo, name), name


def test_the_seeds_module_path_reads_ddo_presets_from_ddod(daemon, monkeypatch):
    from diffusers_dynamic_offloader import dynamic_offload
    from diffusers_dynamic_offloader.default_client import close_default_client
    from diffusers_dynamic_offloader.seed_compat import presets

    monkeypatch.setenv("DDO_DAEMON", daemon.address)
    monkeypatch.delitem(presets.__dict__, "DDO_PRESETS", raising=False)
    try:
        table = dynamic_offload.DDO_PRESETS
        assert type(table) is dict and "low_ram_safe" in table
        assert table is presets.DDO_PRESETS is ddo.DDO_PRESETS
    finally:
        monkeypatch.delitem(presets.__dict__, "DDO_PRESETS", raising=False)
        close_default_client()
