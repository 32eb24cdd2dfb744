"""The ``segpipe`` command. Thin: parses arguments, calls the Python API by keyword, reports.

Errors the user can fix (:class:`segpipe.SegpipeError`) are printed as one line on stderr with
exit code 2; ``--debug`` shows the traceback instead. Heavy imports happen inside commands so
``segpipe --help`` stays fast.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from segpipe._cli_stats import add_stats
from segpipe._version import __version__
from segpipe.errors import SegpipeError

__all__ = ["main", "build_parser"]

Handler = Callable[[argparse.Namespace], int]


# ----------------------------------------------------------------------------- argument types
def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def _int_triple(text: str) -> tuple[int, int, int]:
    """``96`` or ``96,96,64`` -> (96, 96, 64) (x, y, z)."""
    parts = [p for p in text.replace("x", ",").split(",") if p.strip()]
    try:
        values = [int(p) for p in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected one or three integers like 96,96,64, got {text!r}") from None
    if len(values) == 1:
        values = values * 3
    if len(values) != 3 or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected one or three positive integers like 96,96,64, got {text!r}")
    return (values[0], values[1], values[2])


def _float_triple(text: str) -> tuple[float, float, float]:
    """``1.5`` or ``0.7,0.7,2.5`` -> (x, y, z) in mm."""
    parts = [p for p in text.split(",") if p.strip()]
    try:
        values = [float(p) for p in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected one or three numbers like 0.7,0.7,2.5, got {text!r}") from None
    if len(values) == 1:
        values = values * 3
    if len(values) != 3 or any(not v > 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected one or three positive numbers like 0.7,0.7,2.5, got {text!r}")
    return (values[0], values[1], values[2])


# ----------------------------------------------------------------------------- subcommands
# Each _add_<name> registers one subcommand; its handler imports what it needs lazily.


def _add_synth(sub: argparse._SubParsersAction) -> None:
    pathologies = ("nodules", "consolidation", "ground_glass", "emphysema", "effusion", "collapse")
    p = sub.add_parser(
        "synth",
        help="write synthetic chest CT phantoms with lung labels (Decathlon layout)",
        description=(
            "Generate seeded chest CT phantoms built from anatomy in mm (body, skeleton, lungs with vessel "
            "trees, airways, mediastinum, abdomen, optional pathology, scanner noise) and write "
            "OUT/imagesTr, OUT/labelsTr and OUT/dataset.json (labels 0 background, 1 right lung, 2 left lung). "
            "Unset options are drawn at random per case."
        ),
        epilog="Example: segpipe synth --out phantoms --n 20 --seed 1 --size 128,128,96 --coverage chest --preview",
    )
    p.add_argument("--out", required=True, metavar="DIR", help="output folder (created if missing)")
    p.add_argument("--n", type=_positive_int, default=1, metavar="N", help="number of cases (default 1)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="dataset seed (default 0); case i depends on (S, i) only")
    p.add_argument("--size", type=_int_triple, metavar="X,Y,Z", help="grid in voxels (default 512x512 in-plane)")
    p.add_argument("--spacing", type=_float_triple, metavar="SX,SY,SZ", help="voxel spacing in mm (default from the field of view)")
    p.add_argument("--fov", type=float, metavar="MM", help="in-plane field of view in mm when size or spacing is unset")
    p.add_argument("--slice", type=float, metavar="MM", help="slice spacing in mm when size and spacing are unset")
    p.add_argument("--coverage", choices=("chest", "chest_abdomen", "neck_pelvis", "lung_bases", "no_lungs", "abdomen_bases"),
                   help="body region scanned (default: random, mostly chest)")
    p.add_argument("--orientation", type=str.upper, choices=("LPS", "RAS", "LAS", "LPI"),
                   help="storage orientation (default: random)")
    p.add_argument("--dtype", choices=("int16", "float32"), help="voxel type (default: random)")
    p.add_argument("--pathology", metavar="LIST", default="random",
                   help="comma list of pathologies to place in every case ("
                        + ", ".join(pathologies) + "), 'none', or 'random' (default: each with its own probability)")
    p.add_argument("--noise", type=float, metavar="HU", help="noise standard deviation at chest level (default: random 5-60)")
    p.add_argument("--contrast", choices=("yes", "no"), help="intravenous contrast (default: random)")
    p.add_argument("--padding", choices=("none", "-1024", "-2048", "-3024"),
                   help="value outside the circular field of view (default: random)")
    p.add_argument("--abdomen-detail", type=float, metavar="P",
                   help="probability of the detailed abdomen: haustra, small-bowel loops, varied tables (default 0)")
    p.add_argument("--preview", nargs="?", const=True, default=False, metavar="PNG",
                   help="QC pictures: without a value one PNG per case in OUT/preview/; with PNG, the first case there")
    p.add_argument("--quiet", action="store_true", help="no progress bar")

    def one_line_error(message: str) -> None:  # bad options: one line, exit code 2
        print(f"segpipe synth: error: {message}", file=sys.stderr)
        raise SystemExit(2)

    p.error = one_line_error  # type: ignore[method-assign]

    def run(args: argparse.Namespace) -> int:
        import time
        from pathlib import Path

        from segpipe.errors import ConfigError
        from segpipe.synthetic import write_dataset

        options: dict = {}
        for key, value in (("size_xyz", args.size), ("spacing_xyz", args.spacing), ("fov_mm", args.fov),
                           ("slice_mm", args.slice), ("coverage", args.coverage), ("orientation", args.orientation),
                           ("dtype", args.dtype), ("noise_hu", args.noise), ("abdomen_detail", args.abdomen_detail)):
            if value is not None:
                options[key] = value
        if args.contrast is not None:
            options["contrast"] = args.contrast == "yes"
        if args.padding is not None:
            options["padding_value"] = None if args.padding == "none" else int(args.padding)
        choice = args.pathology.strip().lower()
        if choice != "random":
            wanted = set() if choice == "none" else {w.strip() for w in choice.split(",") if w.strip()}
            unknown = sorted(wanted - set(pathologies))
            if unknown:
                raise ConfigError(f"--pathology: expected names from {', '.join(pathologies)}, 'none' or 'random', got {unknown[0]!r}")
            options.update({name: float(name in wanted) for name in pathologies})
        start = time.perf_counter()
        path = write_dataset(args.out, args.n, args.seed, preview=args.preview, progress=not args.quiet, **options)
        print(f"wrote {args.n} case(s) to {Path(args.out)} ({path.name}) in {time.perf_counter() - start:.1f} s")
        return 0

    p.set_defaults(handler=run)


def _add_memory(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "memory",
        help="estimate (and measure) the memory of one training step",
        description=(
            "Print the memory one training step needs: parameters per stage, bytes per category "
            "(parameters, gradients, optimizer state, activations saved for backward, input/output/loss, "
            "transient peak in backward, workspace margin) and the total. The measured figures are printed next "
            "to the estimate: by default from one real forward pass (bytes saved for backward, counted with "
            "saved-tensor hooks) when it takes a few seconds; with --measure from a whole training step (also "
            "the tensor peak, peak RSS, and on CUDA the allocator peaks)."
        ),
    )
    p.add_argument("--config", metavar="F", help="YAML with network settings (top level, a 'network' section, or a training config's fine.network)")
    p.add_argument("--patch", type=_int_triple, default=(96, 96, 96), metavar="X,Y,Z", help="patch size in voxels (default 96,96,96)")
    p.add_argument("--batch", type=_positive_int, default=2, help="patches per step (default 2)")
    p.add_argument(
        "--checkpointing",
        metavar="MODE",
        help="none, encoder, all, or comma-separated stage names such as enc0,dec0 (default: the config's)",
    )
    p.add_argument("--amp", action="store_true", help="mixed precision (fp16 on CUDA, bf16 on the CPU)")
    p.add_argument("--optimizer", default="adamw", choices=["adamw", "adam", "sgd", "none"], help="default adamw; sgd means SGD with momentum")
    p.add_argument(
        "--measure",
        action=argparse.BooleanOptionalAction,
        default=None,
        help=(
            "run one real training step (forward, loss, backward) and show the measured figures; by default "
            "only the forward pass is measured, and only when it takes a few seconds"
        ),
    )
    p.add_argument("--device", default="cpu", help="device for --measure: cpu (default), cuda or auto")

    def run(args: argparse.Namespace) -> int:
        import torch

        from segpipe import memory
        from segpipe.config import NetworkConfig
        from segpipe.device import resolve_device
        from segpipe.model import network

        cfg = network.load_network_config(args.config) if args.config else NetworkConfig()
        ckpt = args.checkpointing
        if ckpt is not None and "," in ckpt:
            ckpt = [name.strip() for name in ckpt.split(",") if name.strip()]
        est = memory.estimate_network(cfg, args.patch, args.batch, amp=args.amp, optimizer=args.optimizer, checkpointing=ckpt)
        # --measure: a whole training step; default: the forward pass only, when it is quick.
        measure = memory.should_measure(est) if args.measure is None else args.measure
        measured = None
        if measure:
            full_step = bool(args.measure)
            device = resolve_device(args.device)
            torch.manual_seed(0)
            model = network.build_network(cfg)
            if ckpt is not None:
                model.set_checkpointing(ckpt)
            measured = memory.measure_step(
                model.to(device), est.input_shape, amp=args.amp, device=device, loss="dice_ce",
                backward=full_step, track_live=full_step,
            )
        widths = "-".join(str(w) for w in network.stage_widths(cfg))
        title = (
            f"network   UNet3D {cfg.block}, depth {cfg.depth}, widths {widths}, {cfg.norm} norm, "
            f"{est.parameters:,} parameters"
        )
        print(memory.memory_report(est, measured, title=title))
        if measured is None:
            why = "not requested" if args.measure is False else "the forward pass is large for a quick run; add --measure"
            print(f"not measured: {why}")
        return 0

    p.set_defaults(handler=run)


def _add_plan(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan",
        help="choose patch size, batch size, checkpointing and accumulation for a GPU memory budget",
        description=(
            "Choose the fine stage's training settings for a GPU: the largest patch (multiples of 2**depth, "
            "the crop's aspect, at most the crop rounded up) that fits with the minimum batch, the cheapest "
            "checkpointing that allows it, then batch size and gradient accumulation to reach the target "
            "effective batch with the fewest accumulation steps. Prints the choice and why; --write-config "
            "writes it into a YAML config."
        ),
    )
    p.add_argument("--gpu-memory", required=True, metavar="SIZE", help="the card's memory, e.g. 8GiB, 8GB, 12288MiB")
    p.add_argument("--config", metavar="F", help="YAML with network settings (top level, a 'network' section, or a training config's fine.network)")
    p.add_argument("--write-config", metavar="OUT.yaml", help="put the choice into this training config's fine section (created if missing; other settings kept)")
    p.add_argument("--crop", type=_int_triple, default=(130, 180, 200), metavar="X,Y,Z", help="typical lung crop in voxels at the spacing (default 130,180,200)")
    p.add_argument("--spacing", type=_float_triple, default=(1.5, 1.5, 1.5), metavar="MM", help="target spacing of the crop in mm (default 1.5)")
    p.add_argument("--amp", action=argparse.BooleanOptionalAction, default=True, help="mixed precision (default on)")
    p.add_argument("--optimizer", default="adamw", choices=["adamw", "adam", "sgd", "none"], help="default adamw")
    p.add_argument("--min-batch", type=_positive_int, default=2, help="smallest batch to plan for (default 2)")
    p.add_argument("--target-batch", type=_positive_int, default=4, help="effective batch to reach with accumulation (default 4)")
    p.add_argument("--safety-margin", type=float, default=0.10, help="fraction of the budget kept free (default 0.10)")
    p.add_argument("--reserved", default="512MiB", metavar="SIZE", help="memory for the CUDA context (default 512MiB)")

    def run(args: argparse.Namespace) -> int:
        from segpipe import memory
        from segpipe.config import NetworkConfig
        from segpipe.model import network

        cfg = network.load_network_config(args.config) if args.config else NetworkConfig()
        plan = memory.plan_training(
            gpu_memory=args.gpu_memory,
            network=cfg,
            crop_shape=args.crop,
            spacing_mm=args.spacing,
            amp=args.amp,
            optimizer=args.optimizer,
            min_batch=args.min_batch,
            target_batch=max(args.target_batch, args.min_batch),
            safety_margin=args.safety_margin,
            reserved=args.reserved,
        )
        print(plan.describe())
        if args.write_config:
            path = memory.write_plan_config(plan, cfg, args.write_config)
            print(f"\nwrote {path}")
        return 0

    p.set_defaults(handler=run)


def _add_info(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "info",
        help="print an image's size, spacing, origin, orientation and HU range",
        description="Read an image (NIfTI, NRRD, MHA/MHD or DICOM folder) the way segpipe does and print its geometry.",
    )
    p.add_argument("input", help="image file or DICOM folder")
    p.add_argument("--series", metavar="UID", help="DICOM SeriesInstanceUID to read when a folder holds several")

    def run(args: argparse.Namespace) -> int:
        import numpy as np
        import SimpleITK as sitk

        from segpipe import io, spatial

        image = io.read_image(args.input, series_uid=args.series)
        array = sitk.GetArrayViewFromImage(image)
        print(f"file        {args.input}")
        print(f"size (xyz)  {image.GetSize()}")
        print(f"spacing mm  {tuple(round(s, 4) for s in image.GetSpacing())}")
        print(f"origin mm   {tuple(round(o, 3) for o in image.GetOrigin())}")
        print(f"orientation {spatial.orientation_code(image)}")
        print(f"pixel type  {image.GetPixelIDTypeAsString()}")
        print(f"HU range    {float(np.min(array)):.0f} .. {float(np.max(array)):.0f}")
        return 0

    p.set_defaults(handler=run)


def _add_convert(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "convert",
        help="convert an image or DICOM folder to NIfTI/NRRD/MHA with its exact geometry",
        description=(
            "Read an image (NIfTI, NRRD, MHA/MHD or a DICOM folder, in HU) and write it in the format "
            "given by OUTPUT's suffix, keeping size, spacing, origin and direction. The write is atomic."
        ),
    )
    p.add_argument("input", help="image file or DICOM folder")
    p.add_argument("output", help="output file (.nii.gz, .nii, .nrrd, .nhdr, .mha or .mhd)")
    p.add_argument("--series", metavar="UID", help="DICOM SeriesInstanceUID to read when a folder holds several")
    p.add_argument("--overwrite", action="store_true", help="replace OUTPUT if it exists")

    def run(args: argparse.Namespace) -> int:
        from segpipe import io

        io.check_output_path(args.output, overwrite=args.overwrite)  # fail before reading
        image = io.read_image(args.input, series_uid=args.series)
        out = io.write_image(image, args.output, overwrite=args.overwrite)
        print(f"wrote {out} {image.GetSize()}")
        return 0

    p.set_defaults(handler=run)


def _add_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train the coarse localiser and the fine lung segmenter into one model file",
        description=(
            "Train segpipe's two stages on a dataset (Decathlon dataset.json, nnU-Net v2 raw layout, or "
            "images/ + labels/ folders; labels 0 background, 1 right lung, 2 left lung). Without --data it "
            "trains on the bundled data_samples/train_96 phantoms. Writes checkpoints, metrics.jsonl, "
            "curves.png and model.pt into --out. Multi-process: --nproc N (one machine) or launch with torchrun."
        ),
    )
    p.add_argument("--config", metavar="YAML", help="training config (see configs/); defaults apply to missing keys")
    p.add_argument("--data", metavar="DIR", help="dataset folder (default: data_samples/train_96)")
    p.add_argument("--out", metavar="RUN_DIR", help="run folder (default: runs/<date-time>)")
    p.add_argument("--stage", choices=("both", "coarse", "fine"), help="stages to train (default: the config's, both)")
    p.add_argument("--resume", action="store_true", help="continue from RUN_DIR's latest checkpoints")
    p.add_argument("--init", metavar="MODEL", help="fine-tune: start from this model file's weights ('default': the bundled model)")
    p.add_argument("--gpu-memory", metavar="SIZE", help="plan the fine stage for this GPU budget first (e.g. 8GiB)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), help="training device (default: the config's, auto)")
    p.add_argument("--nproc", type=_positive_int, default=1, help="processes on this machine (wraps torchrun)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override one config value, e.g. --set fine.epochs=5 (repeatable)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")

    def run(args: argparse.Namespace) -> int:
        import dataclasses
        import os
        import time

        from segpipe.config import TrainConfig, apply_overrides, load_yaml

        cfg = load_yaml(args.config, TrainConfig) if args.config else TrainConfig()
        cfg = apply_overrides(cfg, args.overrides)
        if args.stage:
            cfg = dataclasses.replace(cfg, stages=args.stage)
        if args.device:
            cfg = dataclasses.replace(cfg, device=args.device)
        if args.init:
            cfg = dataclasses.replace(cfg, init_model=args.init)
        out = Path(args.out) if args.out else Path("runs") / time.strftime("%Y%m%d-%H%M%S")
        if args.nproc > 1 and int(os.environ.get("WORLD_SIZE", "1")) == 1:
            from segpipe.device import resolve_device

            if resolve_device(cfg.device).type == "cuda":  # one GPU per process, checked before launching
                import torch

                from segpipe.errors import ConfigError
                from segpipe.train.trainer import gpu_processes_message

                if args.nproc > torch.cuda.device_count():
                    raise ConfigError(gpu_processes_message(args.nproc, torch.cuda.device_count()))
            return _relaunch_with_torchrun(args.argv, args.nproc, out)
        from segpipe import train as train_mod

        if args.gpu_memory:
            cfg, plan = train_mod.apply_memory_plan(cfg, args.gpu_memory)
            print(plan.describe())
        result = train_mod.train(cfg, data_dir=args.data, run_dir=out, resume=args.resume, progress=not args.quiet)
        if int(os.environ.get("RANK", "0")) == 0:
            for stage, best in result.best.items():
                scores = ", ".join(f"{k} {v:.4f}" for k, v in best.items() if k.startswith("dice"))
                print(f"{stage}: best epoch {best.get('epoch', '-')}: {scores}")
            print(f"model: {result.model_path}" if result.model_path else f"run folder: {out} (no model.pt yet)")
        return 0

    p.set_defaults(handler=run)


def _relaunch_with_torchrun(argv: list[str], nproc: int, out: Path) -> int:
    """Run the command ``argv`` again under ``torchrun --standalone --nproc_per_node N`` (one
    machine), without ``--nproc``."""
    import subprocess

    cleaned: list[str] = []
    skip = False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == "--nproc":
            skip = True
            continue
        if a.startswith("--nproc="):
            continue
        cleaned.append(a)
    if "--out" not in cleaned and not any(a.startswith("--out=") for a in cleaned):
        cleaned += ["--out", str(out)]  # every process must write to the same folder
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", "-m", "segpipe", *cleaned]
    return subprocess.call(cmd)


def _shard(text: str) -> tuple[int, int]:
    try:
        i, n = (int(v) for v in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected i/n like 0/4, got {text!r}") from None
    if n < 1 or not 0 <= i < n:
        raise argparse.ArgumentTypeError(f"expected 0 <= i < n in i/n, got {text!r}")
    return i, n


def _add_infer(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "infer",
        help="segment the lungs of CT scans (file, DICOM folder, or a folder of scans)",
        description=(
            "Segment the lungs: writes <name>_lungs.nii.gz (uint8; 0 background, 1 right lung, 2 left lung; "
            "exactly the input's size, spacing, origin and direction) and <name>_lungs.json (volumes, boxes, "
            "timings, memory, warnings) per scan; with --qc also a PNG. A folder that is not a DICOM series "
            "is processed scan by scan, skipping scans whose mask exists unless --overwrite."
        ),
    )
    _add_batch_arguments(p)
    p.add_argument("--model", metavar="FILE", help="model file from segpipe train (default: the bundled model)")
    p.add_argument("--config", metavar="YAML", help="inference settings: device, fast, min_lung_ml, sw_batch_size, rules "
                                                   "(the command line overrides them)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default=None, help="default: auto (CUDA when present)")
    p.add_argument("--fast", action=argparse.BooleanOptionalAction, default=None,
                   help="no window overlap in the fine stage (faster, rougher); --no-fast undoes a config's fast: true")
    p.add_argument("--min-lung-ml", type=_non_negative_float, default=None, metavar="ML",
                   help="smallest lung (mL the coarse stage is sure of) that counts as found, a fifth of it for a lung "
                        "the scan's edge cuts; smaller finds are taken for bowel gas (default 50)")
    p.add_argument("--format", action="append", metavar="LIST",
                   help="output formats, a comma list of nifti (default), dicom-seg, rtstruct; the DICOM ones need a DICOM "
                        "series as input and write <name>_lungs_seg.dcm / <name>_lungs_rtstruct.dcm (docs/outputs.md)")
    _add_rule_arguments(p)
    p.add_argument("--qc-density", action="store_true",
                   help="QC picture with the lungs' LAA-950 voxels (below -950 HU) painted green (implies --qc)")

    def run(args: argparse.Namespace) -> int:
        from segpipe import infer

        jobs = infer.plan_jobs(args.inputs, args.output, shard=args.shard, formats=args.format)
        seg = _segmenter(args)
        results = infer.run_jobs(
            seg, jobs, overwrite=args.overwrite, qc=args.qc, hu_offset=args.hu_offset,
            series_uid=args.series, progress=not args.quiet, qc_density=args.qc_density,
        )
        for r in results:
            print(r)
        return 0

    p.set_defaults(handler=run)


def _add_rule_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-rule", action="append", default=[], metavar="NAME",
                   help="switch a clean-up rule off (repeatable; 'segpipe rules' lists them)")
    p.add_argument("--rule", action="append", default=[], metavar="NAME", help="switch a clean-up rule on (repeatable)")
    p.add_argument("--rule-param", action="append", default=[], metavar="NAME.KEY=VALUE",
                   help="set a rule's parameter, e.g. pleural_air.min_ml=20 (repeatable; VALUE is YAML)")


def _rule_changes(args: argparse.Namespace, base: dict) -> dict:
    """The rule changes of a config file's ``rules`` and the command line (which wins)."""
    import yaml

    from segpipe.errors import ConfigError

    changes: dict = {name: dict(v) if isinstance(v, dict) else {"enabled": v} for name, v in base.items()}
    for item in args.rule_param:
        key, sep, value = item.partition("=")
        name, dot, param = key.partition(".")
        if not (sep and dot and name and param):
            raise ConfigError(f"--rule-param: expected NAME.KEY=VALUE, got {item!r}")
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError as err:
            raise ConfigError(f"--rule-param {item!r}: the value is not valid YAML") from err
        changes.setdefault(name, {})[param] = parsed
    for names, on in ((args.rule, True), (args.no_rule, False)):
        for name in names:
            changes.setdefault(name, {})["enabled"] = on
    both = set(args.rule) & set(args.no_rule)
    if both:
        raise ConfigError(f"rule {sorted(both)[0]!r} is given with both --rule and --no-rule")
    return changes


def _segmenter(args: argparse.Namespace) -> object:
    """The segmenter for ``segpipe infer``'s options: model file, then --config, then flags."""
    from segpipe import infer
    from segpipe.config import InferConfig, load_yaml

    cfg = load_yaml(args.config, InferConfig) if getattr(args, "config", None) else InferConfig()
    opts: dict = {
        "device": args.device or cfg.device,
        "fast": bool(args.fast if args.fast is not None else cfg.fast),
        "rules": _rule_changes(args, cfg.rules),
    }
    min_lung = args.min_lung_ml if args.min_lung_ml is not None else cfg.min_lung_ml
    if min_lung is not None:
        opts["min_lung_ml"] = min_lung
    if cfg.sw_batch_size is not None:
        opts["sw_batch_size"] = cfg.sw_batch_size
    return infer.LungSegmenter.from_file(args.model, **opts) if args.model else infer.LungSegmenter.default(**opts)


def _add_batch_arguments(p: argparse.ArgumentParser) -> None:
    """Inputs and outputs of the commands that segment scans in batches (infer, baseline)."""
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="image file, DICOM folder, or folder of scans")
    p.add_argument("-o", "--output", metavar="OUT",
                   help="output file (one input) or folder (default: the current folder)")
    p.add_argument("--qc", action="store_true", help="also write a QC picture per scan")
    p.add_argument("--overwrite", action="store_true", help="redo scans whose outputs exist")
    p.add_argument("--shard", type=_shard, metavar="I/N", help="process every N-th scan starting at I (cluster arrays)")
    p.add_argument("--hu-offset", type=float, default=0.0, metavar="HU",
                   help="add this to every voxel first (e.g. -1024 for scans stored as HU+1024)")
    p.add_argument("--series", metavar="UID", help="DICOM series to read from a folder with several")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _add_baseline(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "baseline",
        help="segment the lungs with the classical (threshold + morphology) baseline",
        description=(
            "Segment the lungs without a model: HU threshold, outside air removed, airways grown from the "
            "trachea and removed, sides from physical x, holes filled (segpipe.baseline). Inputs and outputs "
            "as for segpipe infer: writes <name>_lungs.nii.gz (uint8; 0 background, 1 right lung, 2 left "
            "lung; exactly the input's size, spacing, origin and direction) and <name>_lungs.json (volumes, "
            "time) per scan, so segpipe evaluate scores the baseline the same way as the model. Scans whose "
            "mask exists are skipped unless --overwrite."
        ),
        epilog="Example: segpipe baseline scans/ -o baseline/ && segpipe evaluate --pred baseline/ --ref labels/",
    )
    _add_batch_arguments(p)

    def run(args: argparse.Namespace) -> int:
        from segpipe import baseline

        for line in baseline.segment_files(
            args.inputs, args.output, overwrite=args.overwrite, qc=args.qc, hu_offset=args.hu_offset,
            series_uid=args.series, shard=args.shard, progress=not args.quiet,
        ):
            print(line)
        return 0

    p.set_defaults(handler=run)


def _add_evaluate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "evaluate",
        help="score predicted lung masks against reference masks (Dice, HD95, ASSD, volumes)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="""\
Score predicted lung masks against reference masks (labels 0 background, 1 right lung,
2 left lung), per case and per lung: Dice, HD95 and ASSD in mm (the voxel spacing is
respected), volume of prediction and reference in mL, volume error in mL and %. Then mean,
median and worst (lowest Dice, largest HD95/ASSD, largest absolute volume error) per lung.
Prints a table; --csv and --json also write it (atomically).

Matching: --pred and --ref are label files or folders of them (NIfTI, NRRD, MHA; not
recursive). A file's case name is its name without the image suffix and without a trailing
"_lungs": pred/case_01_lungs.nii.gz (segpipe infer's output) matches ref/case_01.nii.gz,
ref/case_01_lungs.nii.gz or ref/case_01.nrrd, and same names match. Two files
(--pred FILE --ref FILE) are paired whatever their names; a file and a folder, with the
folder's file of the same case. A case on one side only is an error unless --allow-missing,
which skips it with a warning.

Geometry: a prediction must have exactly its reference's size, spacing, origin and direction;
otherwise the command stops with an error naming the case (nothing is resampled).

Empty masks, per lung: both empty (a scan without lungs) -> Dice 1, HD95 0, ASSD 0; one empty
-> Dice 0, HD95 and ASSD inf (null in JSON), left out of mean and median, and the worst.""",
        epilog="Example: segpipe evaluate --pred masks/ --ref labelsTr/ --csv scores.csv --json scores.json",
    )
    p.add_argument("--pred", required=True, metavar="DIR_OR_FILE", help="predicted label file or folder")
    p.add_argument("--ref", required=True, metavar="DIR_OR_FILE", help="reference label file or folder")
    p.add_argument("--csv", metavar="FILE", help="write the rows and the summary as CSV")
    p.add_argument("--json", metavar="FILE", help="write cases, summary and worst cases as JSON")
    p.add_argument("--allow-missing", action="store_true", help="skip cases found on one side only (with a warning)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")

    def run(args: argparse.Namespace) -> int:
        from segpipe import io, metrics

        for out in (args.csv, args.json):  # fail before the long work
            if out:
                io.check_output_path(out, image=False)
        result = metrics.evaluate_folders(args.pred, args.ref, allow_missing=args.allow_missing, progress=not args.quiet)
        print(metrics.format_table(result))
        if args.csv:
            print(f"wrote {metrics.write_csv(result, args.csv)}")
        if args.json:
            print(f"wrote {metrics.write_json(result, args.json)}")
        return 0

    p.set_defaults(handler=run)


def _add_rules(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "rules",
        help="list the clean-up rules in their order, with the parameters a model file stores",
        description=(
            "List the clean-up steps after the networks, in the order they run: name, grid (fine: each fine "
            "region before its probabilities go back to the scan; scan: the scan's own grid), on / off / always, "
            "what it does and its parameters as the model file stores them (older files: today's defaults). "
            "Switch them with 'segpipe infer --no-rule NAME', '--rule NAME', '--rule-param NAME.KEY=VALUE' "
            "or a --config file."
        ),
    )
    p.add_argument("--model", metavar="FILE", help="model file (default: the bundled model)")
    p.add_argument("--json", action="store_true", help="print the parameters as JSON")

    def run(args: argparse.Namespace) -> int:
        import json

        from segpipe.errors import ConfigError, ModelError
        from segpipe.model import DEFAULT_MODEL, load_model
        from segpipe.refine import RuleSet, describe

        header, _ = load_model(args.model or DEFAULT_MODEL)
        try:
            rules = RuleSet.from_dict(header.refine, "refine")
        except ConfigError as err:
            raise ModelError(f"the model file's clean-up rules are invalid ({err})") from err
        print(json.dumps(rules.to_dict(), indent=1) if args.json else "\n".join(describe(rules)))
        return 0

    p.set_defaults(handler=run)


_REGISTRARS = [
    _add_synth, _add_memory, _add_plan, _add_train, _add_infer, _add_rules, _add_baseline, _add_evaluate, _add_info,
    _add_convert, add_stats,
]


def _setup_logging(debug: bool) -> None:
    """segpipe's warnings go to stderr as one line each (the library itself installs nothing)."""
    import logging

    logger = logging.getLogger("segpipe")
    ours = [h for h in logger.handlers if getattr(h, "segpipe_cli", False)]
    if ours:  # main() called again in one process: follow the current sys.stderr
        ours[0].stream = sys.stderr  # type: ignore[attr-defined]  # (setStream would flush a closed one)
    elif not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("segpipe: %(levelname)s: %(message)s"))
        handler.segpipe_cli = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if debug else logging.INFO)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="segpipe",
        description=(
            "Two-stage 3D lung segmentation for CT (labels: 0 background, 1 right lung, 2 left lung) "
            "that fits a stated GPU memory budget and runs well on a CPU."
        ),
        epilog="Run 'segpipe <command> --help' for the options of one command.",
    )
    parser.add_argument("--version", action="version", version=f"segpipe {__version__}")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="<command>")
    for register in _REGISTRARS:
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    args.argv = argv  # the command as given, for commands that relaunch themselves (train --nproc)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    _setup_logging(args.debug)
    try:
        return int(handler(args) or 0)
    except SegpipeError as err:
        if args.debug:
            raise
        print(f"segpipe {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("segpipe: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of the output went away (segpipe info x | head -1)
        _stdout_to_devnull()
        return 141
    except Exception as err:  # a bug: one line unless --debug
        if args.debug:
            raise
        print(
            f"segpipe {args.command}: internal error: {type(err).__name__}: {err} (rerun with --debug for the traceback)",
            file=sys.stderr,
        )
        return 1


def entry() -> None:
    """The ``segpipe`` command (and ``python -m segpipe``): :func:`main`, then exit without the
    interpreter's last garbage collections over every object torch and MONAI made at import
    (``gc.freeze``): 0.5-0.9 s of a command's wall time. The command's files are closed by then."""
    code = main()
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _stdout_to_devnull()
        code = code or 141
    gc.freeze()
    sys.exit(code)


def _stdout_to_devnull() -> None:
    """Point standard output at /dev/null: its reader went away, and Python's exit would
    otherwise fail again flushing it."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


if __name__ == "__main__":  # pragma: no cover
    entry()
