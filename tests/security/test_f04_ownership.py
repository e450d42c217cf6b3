"""Finding 4: pool entries had no owner: any client could evict or replace another user's
component, and a later load_safetensors of the victim's key returned warm_hit=True with the
attacker's bytes.

Now components belong to their uploader's uid and keys are names inside it (issue 31): another
uid's component cannot be evicted, nor replaced (the same key is the caller's own entry), a
warm hit is served across users only for files whose bytes ddod proved equal, and a caller
lists only its own entries.
"""

from __future__ import annotations

import secrets

from attacker_kit import components_pb2
from security_support import assert_still_serving, run_as

VICTIM_BYTES = b"the victim's weights, 32 bytes.."
ATTACKER_BYTES = b"the attacker's weights, 32 byte."  # same size: the same structure

VICTIM_LOADS = """
    ddo = from_environment()
    call, lease = ddo.open_lease(client_name="victim")
    path = own_file("model.safetensors", {{"weight": {payload!r}}})
    outcome = ddo.load(ddo.load_request(lease, {key!r}, [path]))
    try:
        seen = read_component(ddo, lease, {key!r}).get("weight", b"").hex()
    except Exception as error:  # the shared copy cannot be mapped (finding 9)
        seen = f"unreadable: {{error}}"
    report(load=outcome, seen=seen)
"""


def new_key() -> str:
    return f"victim-model-{secrets.token_hex(4)}"


def victim_loads(ddod, victim, key):
    result = run_as(victim, ddod.socket_path, VICTIM_LOADS.format(key=key, payload=VICTIM_BYTES))
    assert result["load"]["code"] == "OK", result
    return result


def admin_component(admin, key):
    """What root sees of the victim's component under ``key`` in its listing of everyone's:
    its status, structure, state and bytes' segment."""
    outcome = admin.call("ListComponents", components_pb2.ListComponentsRequest(),
                         keep=lambda response: [
                             (c.ref.structure_hash, c.state, c.ref.content_hash)
                             for c in response.components
                             if c.ref.cache_key == key and c.owner_uid != 0])
    if outcome["code"] != "OK" or not outcome["response"]:
        return "NOT_FOUND", None
    return outcome["code"], outcome["response"][0]


def test_f4_cannot_evict_another_users_component(ddod, admin, attacker, victim):
    key = new_key()
    victim_loads(ddod, victim, key)
    before = admin_component(admin, key)
    assert before[0] == "OK", before
    result = run_as(attacker, ddod.socket_path, f"""
        ddo = from_environment()
        report(evict=ddo.call("EvictComponent", components_pb2.EvictComponentRequest(cache_key={key!r})))
    """)
    # NOT_FOUND: ddod does not even admit that another user's component exists.
    assert result["evict"]["code"] in ("PERMISSION_DENIED", "NOT_FOUND"), result
    assert admin_component(admin, key) == before, "the victim's component is gone or changed"
    assert_still_serving(ddod)


def test_f4_cannot_replace_another_users_component(ddod, admin, attacker, victim):
    key = new_key()
    victim_loads(ddod, victim, key)
    before = admin_component(admin, key)
    assert before[0] == "OK", before
    result = run_as(attacker, ddod.socket_path, f"""
        ddo = from_environment()
        call, lease = ddo.open_lease()
        # Another structure under the victim's key (an upload), and a file of the attacker's.
        spec = components_pb2.TensorSpec(name="weight", dtype=components_pb2.DTYPE_U8,
                                         shape=[64], byte_size=64)
        evil = own_file("evil.safetensors", {{"weight": b"x" * 48}})
        load = ddo.load(ddo.load_request(lease, {key!r}, [evil]))
        register = ddo.call("RegisterComponent", components_pb2.RegisterComponentRequest(
            lease_id=lease, cache_key={key!r}, tensors=[spec]))
        report(register=register, load=load)
    """)
    # Both are the attacker's own entries under its own name for the key.
    assert result["register"]["code"] == "OK", result
    assert result["load"]["code"] == "OK", result
    listed = admin.call("ListComponents", components_pb2.ListComponentsRequest(),
                        keep=lambda response: sorted(
                            (c.owner_uid, c.ref.structure_hash) for c in response.components
                            if c.ref.cache_key == key))
    assert (victim.uid, before[1][0]) in listed["response"], "the victim's component was replaced"
    again = victim_loads(ddod, victim, key)
    assert again["seen"] == VICTIM_BYTES.hex(), again
    assert_still_serving(ddod)


def test_f4_preloaded_key_does_not_serve_attacker_bytes(ddod, attacker, victim):
    key = new_key()
    planted = run_as(attacker, ddod.socket_path, f"""
        ddo = from_environment()
        call, lease = ddo.open_lease()
        path = own_file("bait.safetensors", {{"weight": {ATTACKER_BYTES!r}}})
        report(load=ddo.load(ddo.load_request(lease, {key!r}, [path])))
    """)
    assert planted["load"]["code"] == "OK", planted  # the attacker may load its own file
    result = run_as(victim, ddod.socket_path,
                    VICTIM_LOADS.format(key=key, payload=VICTIM_BYTES))
    if result["load"]["code"] == "OK":
        assert not result["load"].get("warm_hit"), f"the victim got the attacker's copy: {result}"
        assert result["seen"] == VICTIM_BYTES.hex(), result
    else:
        # Refusing the victim's load is safe too, as long as the message says why.
        assert result["load"]["code"] == "PERMISSION_DENIED", result
    assert ATTACKER_BYTES.hex() not in result["seen"], result
    assert_still_serving(ddod)


def test_f4_listing_shows_only_what_the_caller_may_read(ddod, attacker, victim):
    key = new_key()
    victim_loads(ddod, victim, key)
    result = run_as(attacker, ddod.socket_path, f"""
        ddo = from_environment()
        report(
            listed=ddo.call("ListComponents", components_pb2.ListComponentsRequest(),
                            keep=lambda response: [c.ref.cache_key for c in response.components]),
            got=ddo.call("GetComponent", components_pb2.GetComponentRequest(
                cache_key={key!r}, with_layout=True), keep=str),
        )
    """)
    assert result["listed"]["code"] == "OK", result
    assert key not in result["listed"]["response"], result
    assert result["got"]["code"] in ("NOT_FOUND", "PERMISSION_DENIED"), result
    assert_still_serving(ddod)


def test_f4_a_phase_never_drops_or_names_another_users_warm_slab(ddod, victim, attacker):
    """Phase releases the warm slabs a phase does not need: only the caller's own (it may read
    their components), never another user's, whose cache keys it must not learn either."""
    victim_run = run_as(victim, ddod.socket_path, f"""
        import torch
        from diffusers_dynamic_offloader import DdoClient
        model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Linear(256, 256))
        with DdoClient.connect("unix:" + {ddod.socket_path!r}, allow_embedded=False) as client:
            client.register_module("victim/secret-model-name", model)
            with client.stream(model, "victim/secret-model-name", device="cpu",
                               settings={{"DDO_SMALL_TENSOR_THRESHOLD_KB": "1"}}):
                with torch.no_grad():
                    model(torch.randn(2, 256))
        report(done=True)
    """, timeout=120)
    assert victim_run["done"]
    attack = run_as(attacker, ddod.socket_path, """
        from diffusers_dynamic_offloader._proto import sessions_pb2
        ddo = from_environment()
        call, lease = ddo.open_lease(client_name="attacker")
        phase = ddo.call("Phase", sessions_pb2.PhaseRequest(
            lease_id=lease, phase=sessions_pb2.PHASE_KIND_DECODE),
            keep=lambda r: {"released": r.released_bytes, "notes": list(r.notes)})
        report(phase=phase)
    """)
    assert attack["phase"]["code"] == "OK", attack
    assert attack["phase"]["response"]["released"] == 0, attack
    assert "secret-model-name" not in " ".join(attack["phase"]["response"]["notes"]), attack
    # The slab was there: its owner's own phase releases it.
    owner = run_as(victim, ddod.socket_path, """
        from diffusers_dynamic_offloader._proto import sessions_pb2
        ddo = from_environment()
        call, lease = ddo.open_lease(client_name="victim")
        phase = ddo.call("Phase", sessions_pb2.PhaseRequest(
            lease_id=lease, phase=sessions_pb2.PHASE_KIND_DECODE),
            keep=lambda r: {"released": r.released_bytes})
        report(phase=phase)
    """)
    assert owner["phase"]["code"] == "OK" and owner["phase"]["response"]["released"] > 0, owner
    assert_still_serving(ddod)


def test_f4_a_reader_cannot_set_the_owners_keep_alive_nor_see_the_owner(ddod, attacker, victim):
    """A member who loads the same bytes as another (sharing the owner's copy) must not
    change the owner's keep-alive: a second of it would evict the owner's component, "never"
    would keep it past ddod's default. Its keep-alive is its own entry's; it lists only that."""
    load = """
        ddo = from_environment()
        call, lease = ddo.open_lease()
        path = own_file("model.safetensors", {{"weight": b"same bytes for both members"}})
        load = ddo.load(ddo.load_request(lease, "kept-by-owner", [path],
                                         keep_alive_seconds={keep}))
        listed = ddo.call("ListComponents", components_pb2.ListComponentsRequest(), keep=lambda r:
                          [(c.ref.cache_key, c.owner_shown, c.owner_uid, c.keep_alive_seconds)
                           for c in r.components])
        report(load=load, listed=listed)
    """
    owner = run_as(victim, ddod.socket_path, load.format(keep=-1))
    assert owner["load"]["code"] == "OK" and not owner["load"]["warm_hit"], owner
    reader = run_as(attacker, ddod.socket_path, load.format(keep=1))
    assert reader["load"]["code"] == "OK" and reader["load"]["warm_hit"], reader
    assert reader["listed"]["response"] == [["kept-by-owner", True, attacker.uid, 1]], reader
    owner_again = run_as(victim, ddod.socket_path, load.format(keep=-1))
    assert owner_again["listed"]["response"] == [["kept-by-owner", True, victim.uid, -1]], \
        owner_again
    assert_still_serving(ddod)
