"""CPU backends for the two networks, window by window, side by side in one run.

For the bundled model's coarse (96 x 96 x 64) and fine (64 x 64 x 64) windows, cut from the bundled chest
scan at each stage's spacing: median seconds per forward pass of

- ``torch``: what segpipe runs (eval mode, its memory layout, bf16 autocast where the CPU has native bf16);
- ``torch.compile``: the same module compiled (inductor), timed after warm-up;
- ``onnxruntime``: the network exported with ``torch.onnx.export`` (fp32), ONNX Runtime's CPU provider;
- ``openvino``: the same ONNX file compiled by OpenVINO for the CPU (its default precision: bf16 where the
  CPU has it);

and how far each backend's lung mask (``argmax != 0``) of the window is from torch's (Dice). A backend that
is not installed is skipped with a line saying so. ``pip install onnx onnxruntime openvino`` (not segpipe
dependencies). The issue's bar for adopting one: at least 1.5x faster per window, Dice >= 0.999.

Usage::

    python benchmarks/backend_bench.py [--repeats 10] [--threads N] [--no-compile]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from segpipe.metrics import dice

ROOT = Path(__file__).resolve().parent.parent
CHEST = ROOT / "data_samples" / "chest_512" / "imagesTr" / "phantom_000.nii.gz"


def _crop(arr: np.ndarray, size_zyx: tuple[int, int, int]) -> np.ndarray:
    pad = [(max(0, (s - a + 1) // 2 + 1),) * 2 for a, s in zip(arr.shape, size_zyx)]
    arr = np.pad(arr, pad, mode="edge")
    start = [(a - s) // 2 for a, s in zip(arr.shape, size_zyx)]
    return np.ascontiguousarray(arr[tuple(slice(b, b + s) for b, s in zip(start, size_zyx))])[None, None].astype(np.float32)


def _median_time(fn: Any, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def bench_stage(name: str, header: Any, weights: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from segpipe import spatial
    from segpipe.device import autocast, use_amp
    from segpipe.infer.settings import load_network

    stage = getattr(header, name)
    spacing = tuple(header.spacing.coarse_mm if name == "coarse" else header.spacing.fine_mm)
    from segpipe import io
    from segpipe.model import normalise_hu

    image = spatial.resample_image(spatial.to_canonical(io.read_image(CHEST))[0], spacing)
    x_np = _crop(normalise_hu(io.sitk.GetArrayFromImage(image), tuple(header.intensity.window_hu)), tuple(reversed(stage.patch_xyz)))
    x = torch.from_numpy(x_np)
    net = load_network(name, stage, weights[name], "cpu")
    amp = use_amp("cpu", stage.amp)

    def run_torch(model: Any = net) -> np.ndarray:
        with torch.inference_mode(), autocast("cpu", amp):
            return model(x).float().numpy()

    out: dict[str, Any] = {"window_zyx": list(x_np.shape[2:]), "bf16": amp}
    ref = run_torch()
    ref_mask = ref.argmax(1) != 0
    out["torch"] = {"seconds": round(_median_time(run_torch, args.repeats), 4)}
    results = {"torch": ref}
    if not args.no_compile:
        try:
            compiled = torch.compile(net)
            t = time.perf_counter()
            run_torch(compiled)
            compile_s = time.perf_counter() - t
            results["torch.compile"] = run_torch(compiled)
            out["torch.compile"] = {"seconds": round(_median_time(lambda: run_torch(compiled), args.repeats), 4), "compile_s": round(compile_s, 1)}
        except Exception as err:  # the benchmark reports what failed and goes on
            out["torch.compile"] = {"error": f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"}
    with tempfile.TemporaryDirectory() as tmp:
        onnx_path = Path(tmp) / f"{name}.onnx"
        try:
            torch.onnx.export(net.float(), (x,), str(onnx_path), input_names=["x"], output_names=["logits"], opset_version=17, dynamo=False)
        except Exception as err:
            out["onnx_export"] = {"error": f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"}
            onnx_path = None
        if onnx_path is not None:
            try:
                import onnxruntime as ort

                opts = ort.SessionOptions()
                if args.threads:
                    opts.intra_op_num_threads = args.threads
                sess = ort.InferenceSession(str(onnx_path), opts, providers=["CPUExecutionProvider"])
                results["onnxruntime"] = sess.run(None, {"x": x_np})[0]
                out["onnxruntime"] = {"seconds": round(_median_time(lambda: sess.run(None, {"x": x_np}), args.repeats), 4)}
            except ImportError:
                out["onnxruntime"] = {"error": "not installed"}
            try:
                import openvino as ov

                core = ov.Core()
                config = {"INFERENCE_NUM_THREADS": args.threads} if args.threads else {}
                compiled_ov = core.compile_model(core.read_model(str(onnx_path)), "CPU", config)
                results["openvino"] = compiled_ov(x_np)[0]
                out["openvino"] = {"seconds": round(_median_time(lambda: compiled_ov(x_np), args.repeats), 4),
                                   "precision": str(compiled_ov.get_property("INFERENCE_PRECISION_HINT"))}
            except ImportError:
                out["openvino"] = {"error": "not installed"}
    base = out["torch"]["seconds"]
    for backend, logits in results.items():
        if backend != "torch":
            out[backend]["speedup"] = round(base / out[backend]["seconds"], 2)
            out[backend]["dice_vs_torch"] = round(dice(np.asarray(logits).argmax(1) != 0, ref_mask), 5)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--threads", type=int, default=None, help="threads for every backend (default: each one's own choice)")
    ap.add_argument("--no-compile", action="store_true", help="leave torch.compile out (its compile takes minutes)")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    import torch

    from segpipe.model import DEFAULT_MODEL
    from segpipe.model.file import load_model

    if args.threads:
        torch.set_num_threads(args.threads)
    header, weights = load_model(DEFAULT_MODEL)
    res = {"torch_threads": torch.get_num_threads(), "cpu": torch.backends.cpu.get_cpu_capability()}
    for name in ("coarse", "fine"):
        res[name] = bench_stage(name, header, weights, args)
        print(name, json.dumps(res[name]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
