"""Capacity profiles through a real ddod, in the seed's format (docs/seed.md, "Profiles")."""

import json
import os
import warnings

import pytest

import diffusers_dynamic_offloader as ddo

CONTEXT = {"model": "flux-dev", "gpu": {"name": "RTX 4090", "vram_gb": 24}, "dtype": "bf16",
           "loras": ("a", "b")}


@pytest.fixture
def profile_dir(short_dir):
    return os.path.join(short_dir, "profiles")


def test_keys_are_the_seeds_hash_of_the_normalized_context():
    normalized = ddo.normalize_dynamic_offload_profile_context(CONTEXT)
    assert list(normalized) == sorted(normalized) and normalized["loras"] == ["a", "b"]
    key = ddo.dynamic_offload_profile_key(CONTEXT)
    assert len(key) == 24 and key == ddo.dynamic_offload_profile_key(dict(reversed(CONTEXT.items())))
    assert ddo.dynamic_offload_profile_path(CONTEXT, "/p").name == f"ddo-capacity-v1-{key}.json"
    with pytest.raises(ValueError):
        ddo.normalize_dynamic_offload_profile_context({})
    with pytest.raises(TypeError):
        ddo.normalize_dynamic_offload_profile_context({"x": object()})
    with pytest.raises(TypeError):
        ddo.normalize_dynamic_offload_profile_context({"x": {1: "a"}})


def test_the_directory_follows_ddo_profile_dir(monkeypatch):
    monkeypatch.setenv("DDO_PROFILE_DIR", "~/elsewhere")
    assert str(ddo.get_dynamic_offload_profile_dir()) == os.path.expanduser("~/elsewhere")
    monkeypatch.delenv("DDO_PROFILE_DIR")
    assert str(ddo.get_dynamic_offload_profile_dir()).endswith(".ddo/profiles")


def test_records_are_written_read_and_merged(client, profile_dir):
    assert ddo.load_dynamic_offload_profile(CONTEXT, profile_dir, client) is None
    success = {"status": "success", "capacity": {"metric": "tokens", "value": 4096}}
    path = ddo.record_dynamic_offload_profile(CONTEXT, success, profile_dir,
                                              {"profile_resident_module_budget_gb": 3.5}, client)
    assert path.exists() and oct(os.stat(profile_dir).st_mode & 0o777) == "0o700"
    record = json.loads(path.read_text())
    assert record["schema_version"] == 1 and record["profile_key"] == path.name[16:40]
    assert path.read_text().endswith("\n")
    ddo.record_dynamic_offload_profile(
        CONTEXT, {"status": "success", "capacity": {"metric": "tokens", "value": 8192}},
        profile_dir, None, client)
    ddo.record_dynamic_offload_profile(
        CONTEXT, {"status": "failure", "capacity": {"metric": "tokens", "value": 16384}},
        profile_dir, None, client)
    ddo.record_dynamic_offload_profile(CONTEXT, {"status": "other",
                                                 "capacity": {"metric": "tokens", "value": 1}},
                                       profile_dir, None, client)
    profile = ddo.load_dynamic_offload_profile(CONTEXT, profile_dir, client)
    assert ddo.get_dynamic_offload_profile_capacity(profile, "tokens") == {
        "max_success": 8192.0, "min_failure": 16384.0}
    assert ddo.get_dynamic_offload_profile_capacity(profile, "frames") is None
    # The recommendation is kept when a later record gives none.
    assert ddo.get_dynamic_offload_profile_recommendation(profile) == {
        "profile_resident_module_budget_gb": 3.5}
    for value in range(25):
        ddo.record_dynamic_offload_profile(CONTEXT, {"status": "noted", "n": value}, profile_dir,
                                           None, client)
    profile = ddo.load_dynamic_offload_profile(CONTEXT, profile_dir, client)
    assert len(profile["observations"]) == 20 and profile["observations"][-1]["n"] == 24


def test_corrupt_or_foreign_files_are_ignored_with_a_warning(client, profile_dir):
    path = ddo.record_dynamic_offload_profile(CONTEXT, {"status": "success"}, profile_dir, None,
                                              client)
    path.write_text("{ truncated")
    with pytest.warns(RuntimeWarning, match="ignoring"):
        assert ddo.load_dynamic_offload_profile(CONTEXT, profile_dir, client) is None
    record = {"schema_version": 1, "profile_key": path.name[16:40], "context": {"other": 1}}
    path.write_text(json.dumps(record))
    with pytest.warns(RuntimeWarning, match="not a version 1 record of this context"):
        assert ddo.load_dynamic_offload_profile(CONTEXT, profile_dir, client) is None
    # Recording again replaces the unusable file.
    ddo.record_dynamic_offload_profile(CONTEXT, {"status": "success"}, profile_dir, None, client)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ddo.load_dynamic_offload_profile(CONTEXT, profile_dir, client) is not None


def test_a_session_applies_the_recommendation_unless_a_manual_budget_is_set(client, profile_dir):
    execution = dict(CONTEXT, workload="t2i")
    ddo.record_dynamic_offload_profile(execution, {"status": "success"}, profile_dir,
                                       {"profile_resident_module_budget_gb": 2.25}, client)
    session = ddo.DynamicOffloadProfileSession(execution, CONTEXT, profile_dir, client=client)
    settings = ddo.DynamicOffloadSettings.from_env(default_preset="auto", environ={}, client=client)
    applied, recommendation = session.apply_settings(settings)
    assert applied.config.profile_resident_module_budget_gb == 2.25
    assert recommendation == {"profile_resident_module_budget_gb": 2.25}
    unchanged, _ = session.apply_settings(settings, allow_recommendation=False)
    assert unchanged is settings
    import dataclasses

    manual = dataclasses.replace(settings, config=dataclasses.replace(
        settings.config, resident_module_budget_gb=4.0))
    assert session.apply_settings(manual) == (manual, None)
    assert ddo.DynamicOffloadProfileSession.recommend_resident_budget(24, 17.5, 1.25) == 5.25
    paths = session.record_success({"peak_vram_gb": 17.5},
                                   {"profile_resident_module_budget_gb": 5.25})
    assert all(path.exists() for path in paths)
    assert ddo.get_dynamic_offload_profile_recommendation(session.execution_profile) == {
        "profile_resident_module_budget_gb": 5.25}


class OutOfMemoryError(RuntimeError):
    """Named as torch.cuda.OutOfMemoryError."""


def test_a_capacity_run_warns_beyond_the_validated_range_and_records_oom(client, profile_dir):
    with ddo.profile_capacity_run(CONTEXT, "frames", 97, profile_dir=profile_dir, client=client):
        pass  # recorded as a success
    with pytest.warns(RuntimeWarning, match="exceeds the largest validated value"):
        with pytest.raises(OutOfMemoryError):
            with ddo.profile_capacity_run(CONTEXT, "frames", 161, profile_dir=profile_dir,
                                          client=client):
                raise OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    profile = ddo.load_dynamic_offload_profile(CONTEXT, profile_dir, client)
    assert ddo.get_dynamic_offload_profile_capacity(profile, "frames") == {
        "max_success": 97.0, "min_failure": 161.0}
    with pytest.warns(RuntimeWarning, match="ran out of memory before"):
        with pytest.raises(ValueError):
            with ddo.profile_capacity_run(CONTEXT, "frames", 200, profile_dir=profile_dir,
                                          client=client):
                raise ValueError("not an OOM: nothing recorded")
    assert len(ddo.load_dynamic_offload_profile(CONTEXT, profile_dir, client)["observations"]) == 2


def test_ddoctl_lists_shows_and_removes_profiles(daemon, client, profile_dir):
    import subprocess

    from support import ddoctl_path

    path = ddo.record_dynamic_offload_profile(
        dict(CONTEXT, name="flux-1024"),
        {"status": "success", "capacity": {"metric": "tokens", "value": 4096}}, profile_dir,
        {"profile_resident_module_budget_gb": 3.5}, client)
    key = path.name[16:40]
    env = dict(os.environ, DDO_DAEMON="", DDO_PROFILE_DIR=profile_dir)

    def ddoctl(*words):
        return subprocess.run([ddoctl_path(), "--daemon", daemon.address, "profiles", *words],
                              capture_output=True, text=True, timeout=30, env=env)

    listed = ddoctl()
    assert listed.returncode == 0, listed.stderr
    assert key in listed.stdout and "flux-1024" in listed.stdout
    assert "tokens ok<=4096" in listed.stdout and "profile_resident_module_budget_gb=3.5" in listed.stdout
    shown = ddoctl("show", key)
    assert shown.returncode == 0 and json.loads(shown.stdout)["profile_key"] == key
    assert ddoctl("rm", key).returncode == 0
    assert not path.exists()
    missing = ddoctl("show", key)
    assert missing.returncode == 1 and f"no profile {key}" in missing.stderr
    assert ddoctl("show").returncode == 2
