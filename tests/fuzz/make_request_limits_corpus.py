#!/usr/bin/env python3
"""Writes the seed corpus of tests/fuzz/request_limits_fuzz.cc: one file per seed, its first
byte the request type (the index in kParsers), then the serialized request.

Run once from the repository root (with Debian's python3 and its protobuf):
    PYTHONPATH=client-python/src /usr/bin/python3 tests/fuzz/make_request_limits_corpus.py
"""
import os
import sys

from diffusers_dynamic_offloader._proto import (components_pb2, sessions_pb2, settings_pb2,
                                                profiles_pb2)

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "request_limits")


def tensor(path):
    return components_pb2.TensorSpec(name=path + ".weight", dtype=components_pb2.DTYPE_BF16,
                                     shape=[1024, 1024], byte_size=2 << 20, module_path=path,
                                     module_class="Linear")


def seeds():
    yield "resolve_settings", 3, settings_pb2.ResolveSettingsRequest(
        preset="auto", environment={"DDO_PIN_CPU_MEMORY": "1"},
        overrides={"DDO_ALWAYS_RESIDENT_MODULE_PATTERNS": "(^|\\.)proj_in(\\.|$)"},
        components=["transformer", "vae"],
        component_policies={"vae": settings_pb2.ComponentPolicy(values={"route": "group"})})
    yield "explain_plan", 4, sessions_pb2.ExplainPlanRequest(
        tensors=[tensor("transformer_blocks.0.attn.to_q"), tensor("proj_out")],
        device_uuid="cuda:0", settings={"DDO_SMALL_TENSOR_THRESHOLD_KB": "0"},
        component="transformer")
    yield "connect", 5, sessions_pb2.ConnectRequest(client_pid=4242, client_name="runner")
    yield "register_component", 6, components_pb2.RegisterComponentRequest(
        lease_id="0123456789abcdef", cache_key="org/model@main/unet:bf16",
        tensors=[tensor("blocks.0.ff"), tensor("blocks.1.ff")],
        content_hash="xxh3-64:0123456789abcdef")
    yield "load_safetensors", 9, components_pb2.LoadSafetensorsRequest(
        lease_id="0123456789abcdef", cache_key="org/model@main/vae",
        files=["/models/vae/diffusion_pytorch_model.safetensors"],
        units={"decoder.conv_in.weight": 0})
    yield "attach", 13, sessions_pb2.AttachRequest(
        lease_id="0123456789abcdef", cache_key="org/model@main/unet:bf16", device_uuid="cpu",
        settings={"DDO_RING_SLOTS": "4", "DDO_RESIDENT_MODULE_PATTERNS": "auto"},
        streamable=["blocks.0.ff.weight"])
    yield "set_schedule", 15, sessions_pb2.SetScheduleRequest(session_id="s1",
                                                             unit_order=[0, 1, 2, 1, 0])
    yield "phase", 17, sessions_pb2.PhaseRequest(
        lease_id="0123456789abcdef", phase=sessions_pb2.PHASE_KIND_DENOISE,
        needed=["org/model@main/unet:bf16"], prefetch=["org/model@main/vae"])
    yield "put_profile", 20, profiles_pb2.PutProfileRequest(
        profile=profiles_pb2.Profile(
            ref=profiles_pb2.ProfileRef(key="0123456789abcdef01234567"),
            json='{\n  "profile_key": "0123456789abcdef01234567"\n}\n'),
        profile_dir="/home/me/.ddo/profiles")
    yield "bad_cache_key", 10, components_pb2.GetComponentRequest(cache_key="key\n\x1b[2J")


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, index, request in seeds():
        with open(os.path.join(OUT, name), "wb") as out:
            out.write(bytes([index]) + request.SerializeToString())
    with open(os.path.join(OUT, "file_name"), "wb") as out:
        out.write(bytes([22]) + b"diffusion_pytorch_model-00001-of-00002.safetensors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
