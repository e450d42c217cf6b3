"""Issue 31, finding 5: the same-file proof missed writes through a shared mapping. Writes
through MAP_SHARED change a file's mtime/ctime only at the first fault on a clean page: the
owner of a shared model file mapped it, wrote poison, had ddod load it, wrote the genuine bytes
back (mtime unchanged), and another user's load of the file was a warm hit on the poison.

Now sharing across uids is always by the content proof (ddod hashes what it reads through the
caller's descriptors and compares it with the component's bytes); the file identity only says
which component to compare with.
"""

from __future__ import annotations

import secrets

from security_support import BOTH_DAEMONS, assert_still_serving, run_as

# Each test against a root ddod and against one run as the service user.
pytestmark = BOTH_DAEMONS

GENUINE = b"the genuine weights, 32 bytes..."
POISON = b"POISON POISON POISON POISON POI!"  # same size: the same structure

OWNER_POISONS = """
    import mmap, tempfile
    directory = tempfile.mkdtemp(prefix="ddo-t3-5-", dir="/tmp")
    os.chmod(directory, 0o755)
    path = write_safetensors(os.path.join(directory, "model.safetensors"),
                             {{"weight": {genuine!r}}}, mode=0o644)
    data = open(path, "rb").read()
    offset = data.index({genuine!r})
    fd = os.open(path, os.O_RDWR)
    mapping = mmap.mmap(fd, len(data), mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    mapping[offset:offset + {size}] = {poison!r}      # dirties the page: mtime moves once
    stat_poisoned = os.stat(path)
    ddo = from_environment()
    call, lease = ddo.open_lease()
    loaded = ddo.load(ddo.load_request(lease, {key!r}, [path], keep_alive_seconds=-1))
    mapping[offset:offset + {size}] = {genuine!r}     # the page is dirty already: no update
    stat_restored = os.stat(path)
    mapping.close()
    os.close(fd)
    report(loaded=loaded, path=path,
           same_identity=(stat_poisoned.st_mtime_ns == stat_restored.st_mtime_ns and
                          stat_poisoned.st_ctime_ns == stat_restored.st_ctime_ns),
           on_disk=open(path, "rb").read()[offset:offset + {size}].hex())
"""


def test_t3_5_shared_mapping_poison_is_not_a_warm_hit(ddod, attacker, victim):
    key = f"shared/model-{secrets.token_hex(4)}"
    owner = run_as(attacker, ddod, OWNER_POISONS.format(
        key=key, genuine=GENUINE, poison=POISON, size=len(GENUINE)))
    assert owner["loaded"]["code"] == "OK", owner
    assert owner["on_disk"] == GENUINE.hex(), owner
    # The scenario needs the file's identity unchanged by the write back (it is on tmpfs
    # and ext4: the page stayed dirty); otherwise the old check would have caught it.
    assert owner["same_identity"], owner
    result = run_as(victim, ddod, f"""
        ddo = from_environment()
        call, lease = ddo.open_lease()
        loaded = ddo.load(ddo.load_request(lease, {key!r}, [{owner['path']!r}]))
        seen = read_component(ddo, lease, {key!r}).get("weight", b"").hex() if loaded.ok else ""
        report(loaded=loaded, seen=seen)
    """)
    assert result["loaded"]["code"] == "OK", result
    assert result["seen"] != POISON.hex(), "the victim got the poison the owner wrote"
    assert result["seen"] == GENUINE.hex(), result
    assert not result["loaded"]["warm_hit"], result
    assert_still_serving(ddod)
