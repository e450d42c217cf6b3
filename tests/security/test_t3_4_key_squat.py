"""Issue 31, finding 4: default keys are the same for every user (`<module class>/<component>`
from enable_offload, `ddo-load:<folder>` from load_from_ddod): the first member to register
one owned it and every later member got PERMISSION_DENIED.

Now keys are names inside their uid: the attacker's `flux/transformer` and the victim's are
two entries, so registering a key first blocks nobody. Two users loading the same file share
one copy, only after ddod proved the bytes equal, and either may evict its own entry without
touching the other's.
"""

from __future__ import annotations

import os
import secrets
import tempfile

from attacker_kit import write_safetensors
from security_support import BOTH_DAEMONS, assert_still_serving, run_as

# Each test against a root ddod and against one run as the service user.
pytestmark = BOTH_DAEMONS

VICTIM = b"the victim's weights, 32 bytes.."
ATTACKER = b"the attacker's weights, 32 byte."  # same size: the same structure

# The victim's runner: registers its module as enable_offload does (an upload under the
# default key) and loads a file under a ddo-load: key, then reads back what it got.
VICTIM_RUNS = """
    import torch
    from diffusers_dynamic_offloader import DdoClient
    ddo = from_environment()
    call, lease = ddo.open_lease(client_name="victim")
    model = torch.nn.Linear(4, 4, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.arange(16, dtype=torch.float32).reshape(4, 4))
    try:
        with DdoClient.connect("unix:" + {socket!r}, allow_embedded=False) as client:
            registered = client.register_module({module_key!r}, model)
            registered = dict(code="OK", warm_hit=registered.warm_hit)
    except Exception as error:
        registered = dict(code=type(error).__name__, details=str(error))
    seen_module = read_component(ddo, lease, {module_key!r}).get("weight", b"").hex() \\
        if registered["code"] == "OK" else ""
    path = own_file("model.safetensors", {{"weight": {payload!r}}})
    loaded = ddo.load(ddo.load_request(lease, {load_key!r}, [path]))
    seen = read_component(ddo, lease, {load_key!r}).get("weight", b"").hex() if loaded.ok else ""
    report(registered=registered, seen_module=seen_module, loaded=loaded, seen=seen,
           expected_module=model.weight.detach().numpy().tobytes().hex())
"""


def test_t3_4_squatted_default_keys_do_not_block_the_victim(ddod, attacker, victim):
    module_key = f"Linear/transformer-{secrets.token_hex(3)}"
    load_key = f"ddo-load:/models/flux-{secrets.token_hex(3)}"
    squat = run_as(attacker, ddod, f"""
        ddo = from_environment()
        call, lease = ddo.open_lease()
        # The victim's default keys, first, committed, with the attacker's bytes.
        registered, _ = upload(ddo, lease, {module_key!r}, {{"weight": bytes(64)}})
        path = own_file("bait.safetensors", {{"weight": {ATTACKER!r}}})
        loaded = ddo.load(ddo.load_request(lease, {load_key!r}, [path],
                                           keep_alive_seconds=-1))
        report(registered=registered, loaded=loaded)
    """)
    assert squat["registered"]["code"] == "OK", squat
    assert squat["loaded"]["code"] == "OK", squat
    result = run_as(victim, ddod, VICTIM_RUNS.format(
        socket=ddod.socket_path, module_key=module_key, load_key=load_key, payload=VICTIM))
    assert result["registered"]["code"] == "OK", result
    assert not result["registered"]["warm_hit"], result
    assert result["seen_module"] == result["expected_module"], result
    assert result["loaded"]["code"] == "OK", result
    assert not result["loaded"]["warm_hit"], result
    assert result["seen"] == VICTIM.hex(), result
    assert_still_serving(ddod)


def shared_model(directory: str, payload: bytes) -> str:
    path = write_safetensors(os.path.join(directory, "model.safetensors"), {"weight": payload},
                             mode=0o644)
    os.chmod(directory, 0o755)
    return path


LOADS = """
    ddo = from_environment()
    call, lease = ddo.open_lease()
    loaded = ddo.load(ddo.load_request(lease, {key!r}, [{path!r}]))
    seen = read_component(ddo, lease, {key!r}).get("weight", b"").hex() if loaded.ok else ""
    stats = ddo.call("GetStats", stats_pb2.GetStatsRequest(),
                     keep=lambda response: response.pool.used_bytes)
    evicted = ddo.call("EvictComponent", components_pb2.EvictComponentRequest(cache_key={key!r})) \\
        if {evict!r} else None
    report(loaded=loaded, seen=seen, evicted=evicted, stats=stats)
"""


def test_t3_4_same_file_shares_one_copy_after_the_proof(ddod, admin, attacker, victim):
    key = f"flux/transformer-{secrets.token_hex(3)}"
    directory = tempfile.mkdtemp(prefix="ddo-t3-4-", dir="/tmp")
    path = shared_model(directory, VICTIM)
    first = run_as(victim, ddod, LOADS.format(key=key, path=path, evict=False))
    assert first["loaded"]["code"] == "OK" and not first["loaded"]["warm_hit"], first
    second = run_as(attacker, ddod, LOADS.format(key=key, path=path, evict=True))
    assert second["loaded"]["code"] == "OK", second
    assert second["loaded"]["warm_hit"], f"the same bytes were not shared: {second}"
    assert second["seen"] == VICTIM.hex(), second
    # The attacker evicted its own entry: the victim's stays, with its bytes.
    assert second["evicted"]["code"] == "OK", second
    again = run_as(victim, ddod, LOADS.format(key=key, path=path, evict=False))
    assert again["loaded"]["code"] == "OK" and again["loaded"]["warm_hit"], again
    assert again["seen"] == VICTIM.hex(), again
    assert_still_serving(ddod)


def test_t3_4_other_bytes_under_the_same_key_are_not_shared(ddod, attacker, victim):
    key = f"flux/transformer-{secrets.token_hex(3)}"
    planted = run_as(attacker, ddod, f"""
        ddo = from_environment()
        call, lease = ddo.open_lease()
        path = own_file("bait.safetensors", {{"weight": {ATTACKER!r}}})
        report(loaded=ddo.load(ddo.load_request(lease, {key!r}, [path])))
    """)
    assert planted["loaded"]["code"] == "OK", planted
    directory = tempfile.mkdtemp(prefix="ddo-t3-4-", dir="/tmp")
    result = run_as(victim, ddod,
                    LOADS.format(key=key, path=shared_model(directory, VICTIM), evict=False))
    assert result["loaded"]["code"] == "OK", result
    assert not result["loaded"]["warm_hit"], result
    assert result["seen"] == VICTIM.hex(), result
    assert_still_serving(ddod)
