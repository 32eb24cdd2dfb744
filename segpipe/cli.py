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

from segpipe._cli_args import _non_negative_float
from segpipe._cli_stats import add_stats
from segpipe._cli_train import add_memory, add_plan, add_synth, add_train
from segpipe._version import __version__
from segpipe.errors import SegpipeError

__all__ = ["main", "build_parser"]

Handler = Callable[[argparse.Namespace], int]


# ----------------------------------------------------------------------------- subcommands
# Each _add_<name> registers one subcommand; its handler imports what it needs lazily.


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
                   help="no window overlap in the fine stage and one coarse pass in a narrow view (faster, rougher); "
                        "--no-fast undoes a config's fast: true")
    p.add_argument("--min-lung-ml", type=_non_negative_float, default=None, metavar="ML",
                   help="smallest lung (mL the coarse stage is sure of) that counts as found, 3%% of it for a lung "
                        "the scan's edge cuts (rule gas checks those under 5%%); smaller finds are taken for bowel gas "
                        "(default 50)")
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
    infer.import_monai_lean()  # this process uses MONAI only through segpipe
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
    add_synth, add_memory, add_plan, add_train, _add_infer, _add_rules, _add_baseline, _add_evaluate, _add_info,
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
