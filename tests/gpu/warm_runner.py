"""A runner process of test_pipeline_gpu.py: loads the small FLUX transformer through ddod
(load_from_ddod: built on the meta device, every weight bound to ddod's copy), routes it,
runs one denoising step, saves the output and prints its timings as one JSON line.

    python3 warm_runner.py ADDRESS CHECKPOINT_FOLDER OUTPUT.pt RESIDENT_BUDGET_GB [DEVICE]
"""

import json
import sys
import time

started = time.perf_counter()
import torch  # noqa: E402

import diffusers  # noqa: E402

import small_flux  # noqa: E402
from diffusers_dynamic_offloader import DdoClient, enable_offload, load_from_ddod  # noqa: E402

# diffusers imports its model classes lazily, on first access: part of the imports.
MODEL_CLASS = diffusers.FluxTransformer2DModel


def main(address: str, folder: str, output: str, budget_gb: str,
         device: str = small_flux.DEVICE) -> None:
    imported = time.perf_counter()
    with DdoClient.connect(address, timeout=120) as client:
        loaded = load_from_ddod(MODEL_CLASS, folder, subfolder="transformer",
                                torch_dtype=small_flux.DTYPE, client=client, progress=False)
        bound = time.perf_counter()
        result = enable_offload(loaded.module, component="transformer",
                                cache_key=loaded.cache_key, execution_device=device,
                                client=client, environ={}, small_tensor_threshold_kb=0,
                                resident_module_budget_gb=float(budget_gb))
        routed = time.perf_counter()
        with torch.no_grad():
            out = loaded.module(**small_flux.transformer_inputs(device))[0]
        torch.cuda.synchronize(device)
        stepped = time.perf_counter()
        torch.save(out.cpu(), output)
        print(json.dumps({
            "warm": loaded.warm, "route": result.route, "imports_s": imported - started,
            "load_s": bound - imported, "route_s": routed - bound, "first_step_s": stepped - routed,
            "ready_s": stepped - imported,
            "device_uuid": result.hook.resources.device_uuid}), flush=True)
        result.release()


if __name__ == "__main__":
    main(*sys.argv[1:6])
