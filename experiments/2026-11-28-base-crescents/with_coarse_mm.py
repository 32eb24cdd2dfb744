"""Run a script with the coarse grid's spacing from $COARSE_MM (x/y/z mm), every segmenter it makes:
``COARSE_MM=3/3/3 python with_coarse_mm.py SCRIPT ARGS...``."""

import dataclasses
import os
import runpy
import sys

from segpipe.infer import segmenter

COARSE_MM = tuple(float(v) for v in os.environ["COARSE_MM"].split("/"))
_init = segmenter.LungSegmenter.__init__


def _init_with_coarse_mm(self, *args, **kwargs) -> None:
    _init(self, *args, **kwargs)
    self.settings = dataclasses.replace(self.settings, coarse_mm=COARSE_MM)


segmenter.LungSegmenter.__init__ = _init_with_coarse_mm
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[0])))
runpy.run_path(sys.argv[0], run_name="__main__")
