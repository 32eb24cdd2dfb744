"""A/B of the command's MONAI import: ``ab.py plain|lean ARGS...`` runs ``segpipe ARGS...``
with MONAI imported as usual (``plain``: the lean import switched off) or as the command does."""

import importlib
import sys

from segpipe import cli
from segpipe.infer import settings

if sys.argv[1] == "plain":
    def _plain_import() -> bool:
        importlib.import_module("monai.inferers")
        return False

    settings.import_monai_lean = _plain_import
    sys.modules["segpipe.infer"].import_monai_lean = _plain_import  # the name cli calls
sys.argv = ["segpipe", *sys.argv[2:]]
cli.entry()
