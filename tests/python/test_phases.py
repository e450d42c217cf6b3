"""Pipeline phases against a real ddod (host backend): what a phase releases, what it
prefetches, the sessions it closes, and the seed's Windows purge API off Windows."""

import os

import pytest
import torch

import diffusers_dynamic_offloader as ddo
from diffusers_dynamic_offloader import DdoClient
from test_streaming import STREAM_ALL, make_model


def _slab_of(session):
    return {d.key: d.value for d in session.plan.decisions}["slab"]


@pytest.fixture
def warm_client(daemon_factory, short_dir):
    warm = daemon_factory(os.path.join(short_dir, "warm", "ddod.sock"), "--preset", "warm_process")
    with DdoClient.connect(warm.address) as client:
        yield client


def _open(client, model, key):
    return client.stream(model, key, device="cpu", settings=STREAM_ALL)


def test_a_phase_frees_the_slabs_no_coming_phase_needs(warm_client):
    encoder, transformer = make_model(torch.float32), make_model(torch.float32)
    warm_client.register_module("phase/encoder", encoder)
    warm_client.register_module("phase/transformer", transformer)
    with _open(warm_client, encoder, "phase/encoder") as session:
        slab = session.resources.resident_slab_shm
    assert os.path.exists("/dev/shm/" + slab.lstrip("/"))  # warm_process kept it
    result = ddo.enter_phase("denoise", needed=["phase/transformer"], client=warm_client)
    assert result["released_bytes"] > 0
    assert any("phase/encoder" in note for note in result["notes"]), result["notes"]
    assert not os.path.exists("/dev/shm/" + slab.lstrip("/"))
    # A slab the phase needs stays.
    with _open(warm_client, transformer, "phase/transformer") as session:
        kept = session.resources.resident_slab_shm
    again = ddo.enter_phase("denoise", needed=["phase/transformer"], client=warm_client)
    assert again["released_bytes"] == 0
    assert os.path.exists("/dev/shm/" + kept.lstrip("/"))


def test_the_next_phases_slab_is_prefetched_and_found_warm(warm_client):
    model = make_model(torch.float32)
    warm_client.register_module("phase/vae", model)
    with _open(warm_client, model, "phase/vae"):
        pass
    # Released by a phase that does not need it...
    assert ddo.enter_phase("prompt", needed=[], client=warm_client)["released_bytes"] > 0
    # ...prefetched by the one before the phase that does, from its last placement.
    result = ddo.enter_phase("denoise", needed=[], prefetch=["phase/vae"], client=warm_client)
    assert result["prefetched_bytes"] > 0, result["notes"]
    with _open(warm_client, model, "phase/vae") as session:
        assert _slab_of(session) == "warm"
    # A component that never had a session has no placement to prefetch.
    other = make_model(torch.float32)
    warm_client.register_module("phase/unseen", other)
    result = ddo.enter_phase("decode", prefetch=["phase/unseen"], client=warm_client)
    assert result["prefetched_bytes"] == 0
    assert any("no earlier session" in note for note in result["notes"]), result["notes"]


def test_released_results_close_before_the_phase(client):
    model = make_model(torch.float32)
    result = ddo.enable_offload(model, component="transformer", execution_device="cpu",
                                client=client, environ={})
    assert result.hook is not None
    events = []
    phase = ddo.enter_phase("decode", release=[result], client=client,
                            record_event=lambda name, seconds, **payload: events.append(name))
    assert result.hook is None and ddo.get_dynamic_offload_state(model) is None
    assert phase["phase"] == "decode" and events == ["phase_decode"]
    assert phase["purge_reason"] == "disabled"


def test_the_standby_purge_is_windows_only(client):
    phase = ddo.enter_phase("before_run", purge_standby=True, client=client)
    assert phase["purged"] is False and phase["purge_reason"] == "non_windows"
    with pytest.raises(RuntimeError, match="Windows only"):
        ddo.purge_windows_standby_cache()
    on = {"DDO_PURGE_WINDOWS_STANDBY_BEFORE_TRANSFORMER": "1"}
    assert ddo.maybe_purge_windows_standby_cache("before_transformer", environ=on, client=client) == {
        "purged": False, "reason": "non_windows", "phase": "before_transformer"}
    assert ddo.maybe_purge_windows_standby_cache(
        "before_transformer", environ={}, preset="off", client=client)["reason"] == "disabled"
    settings = ddo.DynamicOffloadSettings.from_env(default_preset="auto", environ=on, client=client)
    assert ddo.maybe_purge_windows_standby_cache(settings, "before_transformer",
                                                 environ=on)["reason"] == "non_windows"
    # Settings of the off preset: the switch is off.
    off = ddo.DynamicOffloadSettings.from_env(default_preset="off", environ={}, client=client)
    assert ddo.maybe_purge_windows_standby_cache(off, "before_transformer",
                                                 environ={})["reason"] == "disabled"
    with pytest.raises(TypeError, match="phase"):
        ddo.maybe_purge_windows_standby_cache()


def test_an_unknown_phase_is_refused(client):
    with pytest.raises(ValueError, match="before_run, prompt, denoise, decode, after_run"):
        ddo.enter_phase("vae", client=client)


def test_on_windows_ddod_says_its_purge_is_not_built(daemon_factory, short_dir, monkeypatch):
    # The platform fact overridden for the test: ddod believes it runs on Windows.
    monkeypatch.setenv("DDO_PLATFORM", "windows")
    daemon = daemon_factory(os.path.join(short_dir, "run", "ddod.sock"))
    with DdoClient.connect(daemon.address, timeout=10) as windows_client:
        phase = ddo.enter_phase("before_run", purge_standby=True, client=windows_client)
    assert phase["purged"] is False and phase["purge_reason"] == "windows_purge_not_built"

