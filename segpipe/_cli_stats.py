"""The ``segpipe stats`` subcommand (kept apart from ``cli.py`` to keep that file short):
parses, calls :func:`segpipe.stats.density_stats` by keyword, reports."""

from __future__ import annotations

import argparse

from segpipe._cli_args import _non_negative_float

__all__ = ["add_stats"]


def add_stats(sub: argparse._SubParsersAction) -> None:
    """Register ``segpipe stats``."""
    from segpipe import cli

    p = sub.add_parser(
        "stats",
        help="lung density measures (MLD, PD15, LAA-950/-910, HAA) of scans, one CSV row per scan",
        description=(
            "Measure each scan's lungs on its own voxels: volume, mean lung density, PD15, LAA-950, LAA-910 "
            "and HAA for the right lung, the left lung and both, whole and per cranio-caudal third "
            "(docs/density.md has the definitions). The masks come from segmenting each scan, or with "
            "--masks from a folder of existing masks matched by name (NAME_lungs.nii.gz, what segpipe infer "
            "writes, or NAME.nii.gz). Inputs as for segpipe infer. The CSV is written at the end, atomically: "
            "a scan that cannot be read or has no mask stops the command and leaves no CSV."
        ),
        epilog="Example: segpipe infer scans/ -o masks/ && segpipe stats scans/ --masks masks/ -o stats.csv",
    )
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="image file, DICOM folder, or folder of scans")
    p.add_argument("-o", "--output", required=True, metavar="CSV", help="the CSV file to write")
    p.add_argument("--masks", metavar="DIR", help="use these lung masks (a folder, or one file for one scan) instead of segmenting")
    p.add_argument("--hu-offset", type=float, default=0.0, metavar="HU",
                   help="add this to every voxel first (e.g. -1024 for scans stored as HU+1024)")
    p.add_argument("--series", metavar="UID", help="DICOM series to read from a folder with several")
    p.add_argument("--model", metavar="FILE", help="model file for segmenting (default: the bundled model)")
    p.add_argument("--config", metavar="YAML", help="inference settings (as for segpipe infer)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default=None, help="default: auto (CUDA when present)")
    p.add_argument("--fast", action=argparse.BooleanOptionalAction, default=None, help="no window overlap in the fine stage")
    p.add_argument("--min-lung-ml", type=_non_negative_float, default=None, metavar="ML",
                   help="smallest lung that counts as found (as for segpipe infer)")
    cli._add_rule_arguments(p)
    p.add_argument("--quiet", action="store_true", help="no progress bar")

    def run(args: argparse.Namespace) -> int:
        from segpipe import stats

        segmenter = None if args.masks else cli._segmenter(args)
        out = stats.density_stats(
            args.inputs, args.output, masks=args.masks, segmenter=segmenter, hu_offset=args.hu_offset,
            series_uid=args.series, progress=not args.quiet,
        )
        print(f"wrote {out}")
        return 0

    p.set_defaults(handler=run)
