"""GPU only: DDO's fp8 cast kernel (byte_cast.py, client-cpp/src/consumer/byte_cast.cc) is
torch's ``.to()`` bitwise, through the C++ extension and through ctypes, and how fast it is.

For float8_e4m3fn and float8_e5m2 to bf16, fp16 and fp32: all 256 byte values, random tensors
of 1, 15, 16, 17, 4097 and 3072x12288 elements, and views starting at an odd byte (the
kernel's unaligned path), compared as bits (NaN patterns included). Each check also asserts
that the kernel ran (a silent fallback to ``.to()`` would pass vacuously). No ddod is needed;
the extension is built into the per-user cache when none matches (about a minute).

    PYTHONPATH=client-python/src python3 -m pytest -v -s tests/gpu/test_byte_cast_gpu.py

``-s`` shows the timing line of FLUX.1-dev's transformer-block Linears cast once each
(diffusers' shapes, distinct weights: about 11.8 G elements, 11.8 GB of fp8).
"""

from __future__ import annotations

import statistics

import pytest
import torch

from diffusers_dynamic_offloader import byte_cast, cpp_consumer

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or not hasattr(torch, "float8_e4m3fn"),
    reason="needs CUDA and a torch with float8 dtypes")

SOURCES = ["float8_e4m3fn", "float8_e5m2"]
DESTINATIONS = [torch.bfloat16, torch.float16, torch.float32]
SIZES = [1, 15, 16, 17, 4097, (3072, 12288)]


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.view(torch.int32 if tensor.element_size() == 4 else torch.int16)


@pytest.fixture(scope="module")
def extension():
    """The C++ extension with the kernel installed (built here when need be)."""
    byte_cast.reset()
    module = cpp_consumer.extension({"DDO_CLIENT_CONSUMER": "cpp"})
    assert module is not None
    if byte_cast._extension is not module:  # found before this module's reset
        byte_cast.install(module)
    return module


@pytest.fixture(scope="module")
def driver_caster():
    return byte_cast._DriverCaster()


def _cast(path, extension, driver_caster, tensor, dtype):
    """The kernel's cast through `path`; fails when the kernel did not run."""
    if path == "extension":
        assert extension.byte_cast_handles(tensor, dtype), "the extension would not use it"
        out = extension.byte_cast(tensor, dtype)
        assert extension.byte_cast_handles(tensor, dtype), "the kernel was turned off"
        return out
    out = driver_caster._launch(tensor, dtype)
    assert out is not None, "the ctypes launch did not run"
    return out


def _inputs(source: torch.dtype):
    """(label, fp8 tensor): every byte, random sizes, views at an odd offset."""
    device = torch.device("cuda", torch.cuda.current_device())
    yield "all 256", torch.arange(256, dtype=torch.uint8, device=device).view(source)
    generator = torch.Generator(device=device).manual_seed(30)
    for size in SIZES:
        shape = size if isinstance(size, tuple) else (size,)
        count = 1
        for extent in shape:
            count *= extent
        flat = torch.randint(0, 256, (count + 1,), dtype=torch.uint8, device=device,
                             generator=generator)
        yield f"random {shape}", flat[:count].view(shape).view(source)
        yield f"odd offset {shape}", flat[1:].view(shape).view(source)


@pytest.mark.parametrize("path", ["extension", "ctypes"])
@pytest.mark.parametrize("destination", DESTINATIONS, ids=str)
@pytest.mark.parametrize("source_name", SOURCES)
def test_the_kernel_is_torchs_cast_bitwise(path, destination, source_name, driver_caster,
                                           request):
    # The extension only where asked for: the ctypes half runs even if it cannot be built.
    extension = request.getfixturevalue("extension") if path == "extension" else None
    source = getattr(torch, source_name)
    for label, tensor in _inputs(source):
        assert tensor.is_contiguous()
        ours = _cast(path, extension, driver_caster, tensor, destination)
        torch.cuda.synchronize()
        assert ours.shape == tensor.shape and ours.dtype == destination
        assert torch.equal(_bits(ours), _bits(tensor.to(destination))), label


def test_cast_goes_through_the_extension_and_keeps_autograd_casts_to_torch(extension):
    weight = torch.randn(64, 48, device="cuda").to(torch.float8_e4m3fn)
    byte_cast.reset()
    byte_cast.install(extension)
    assert byte_cast._choose() == extension.byte_cast
    assert torch.equal(_bits(byte_cast.cast(weight, torch.bfloat16)),
                       _bits(weight.to(torch.bfloat16)))
    assert not byte_cast.handles(weight.t(), torch.bfloat16)  # not contiguous: torch's
    assert torch.equal(_bits(byte_cast.cast(weight.t(), torch.bfloat16)),
                       _bits(weight.t().to(torch.bfloat16)))


def test_under_graph_capture_the_cast_is_torchs(extension, driver_caster):
    weight = torch.randn(256, device="cuda").to(torch.float8_e4m3fn)
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        extension.byte_cast(weight, torch.bfloat16)  # warm: tables and modules made
        driver_caster.cast(weight, torch.bfloat16)
        stream.synchronize()
        with torch.cuda.graph(graph, stream=stream):
            assert driver_caster._launch(weight, torch.bfloat16) is None
            captured = extension.byte_cast(weight, torch.bfloat16)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(_bits(captured), _bits(weight.to(torch.bfloat16)))


def _flux_block_shapes():
    """(out, in) of every Linear of FLUX.1-dev's 19 double and 38 single blocks (diffusers)."""
    dim, mlp = 3072, 12288
    double = [(dim, dim)] * 8 + [(mlp, dim), (dim, mlp)] * 2 + [(6 * dim, dim)] * 2
    single = [(dim, dim)] * 3 + [(mlp, dim), (dim, dim + mlp), (3 * dim, dim)]
    return double * 19 + single * 38


def test_timing_of_flux_block_casts(extension, driver_caster):
    shapes = _flux_block_shapes()
    weights = [torch.randint(0, 256, shape, dtype=torch.uint8, device="cuda")
               .view(torch.float8_e4m3fn) for shape in shapes]
    elements = sum(weight.numel() for weight in weights)
    casters = {"torch .to()": lambda w: w.to(torch.bfloat16),
               "extension": lambda w: extension.byte_cast(w, torch.bfloat16),
               "ctypes": lambda w: driver_caster.cast(w, torch.bfloat16)}
    lines = []
    for name, cast in casters.items():
        times = []
        for _ in range(4):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for weight in weights:
                cast(weight)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        ms = statistics.median(times[1:])
        lines.append(f"{name}: {ms:.2f} ms ({3 * elements / ms / 1e6:.0f} GB/s)")
    print(f"\n[byte_cast] {len(shapes)} casts fp8 e4m3fn -> bf16, {elements / 1e9:.2f} G "
          f"elements, on {torch.cuda.get_device_name()}: " + "; ".join(lines))
    assert extension.byte_cast_handles(weights[0], torch.bfloat16)
