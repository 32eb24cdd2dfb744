"""The training-side subcommands of ``segpipe`` (``synth``, ``memory``, ``plan``, ``train``), kept
apart from ``cli.py`` to keep that file short: each parses, calls the Python API by keyword and
reports; heavy imports happen inside the handlers."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from segpipe._cli_args import _float_triple, _int_triple, _positive_int

__all__ = ["add_synth", "add_memory", "add_plan", "add_train"]


def add_synth(sub: argparse._SubParsersAction) -> None:
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
    p.add_argument("--whole-lobe", type=float, metavar="P",
                   help="share of lobar consolidations that fill their whole lobe out to the pleura (default 0)")
    p.add_argument("--diaphragm-variety", type=float, metavar="P",
                   help="probability of a diaphragm whose anterior recesses reach as low as the posterior ones (default 0)")
    p.add_argument("--recess-variety", type=float, metavar="P",
                   help="probability of domes whose lowest lung lies toward a direction drawn all round: "
                        "in front, at a side or behind (default 0)")
    p.add_argument("--flexure-variety", type=float, metavar="P",
                   help="probability of a colon whose splenic flexure lies high under the left dome (default 0)")
    p.add_argument("--table-variety", type=float, metavar="P",
                   help="probability of a thick foam mattress (25-70 mm, -900..-600 HU) under the patient (default 0)")
    p.add_argument("--preview", nargs="?", const=True, default=False, metavar="PNG",
                   help="QC pictures: without a value one PNG per case in OUT/preview/; with PNG, the first case there")
    p.add_argument("--workers", type=_positive_int, default=1, metavar="N",
                   help="cases made at once, in N processes (default 1); the cases are the same either way")
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
                           ("dtype", args.dtype), ("noise_hu", args.noise), ("abdomen_detail", args.abdomen_detail),
                           ("whole_lobe", args.whole_lobe), ("diaphragm_variety", args.diaphragm_variety),
                           ("recess_variety", args.recess_variety), ("flexure_variety", args.flexure_variety),
                           ("table_variety", args.table_variety)):
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
        path = write_dataset(args.out, args.n, args.seed, preview=args.preview, progress=not args.quiet,
                             workers=args.workers, **options)
        print(f"wrote {args.n} case(s) to {Path(args.out)} ({path.name}) in {time.perf_counter() - start:.1f} s")
        return 0

    p.set_defaults(handler=run)


def add_memory(sub: argparse._SubParsersAction) -> None:
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


def add_plan(sub: argparse._SubParsersAction) -> None:
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


def add_train(sub: argparse._SubParsersAction) -> None:
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
