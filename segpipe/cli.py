"""The ``segpipe`` command. Thin: parses arguments, calls the Python API by keyword, reports.

Errors the user can fix (:class:`segpipe.SegpipeError`) are printed as one line on stderr with
exit code 2; ``--debug`` shows the traceback instead. Heavy imports happen inside commands so
``segpipe --help`` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

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


def _add_synth(sub: argparse._SubParsersAction) -> None:  # filled in by the phantom generator work
    pass


def _add_memory(sub: argparse._SubParsersAction) -> None:  # filled in by the memory toolkit work
    pass


def _add_plan(sub: argparse._SubParsersAction) -> None:  # filled in by the memory toolkit work
    pass


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


_REGISTRARS = [_add_synth, _add_memory, _add_plan, _add_info, _add_convert]


def _setup_logging(debug: bool) -> None:
    """segpipe's warnings go to stderr as one line each (the library itself installs nothing)."""
    import logging

    logger = logging.getLogger("segpipe")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("segpipe: %(levelname)s: %(message)s"))
        logger.addHandler(handler)
        logger.propagate = False
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
    args = parser.parse_args(argv)
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
    except Exception as err:  # a bug: one line unless --debug
        if args.debug:
            raise
        print(
            f"segpipe {args.command}: internal error: {type(err).__name__}: {err} (rerun with --debug for the traceback)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
