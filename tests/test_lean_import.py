"""MONAI imported without the optional packages segpipe never uses through it (the command's
start-up): each case in a fresh interpreter, since this test process has MONAI already."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, sys
from segpipe.infer import settings
{patch}
first = settings.import_monai_lean()
again = settings.import_monai_lean()
loaded = sorted(n for n in settings.MONAI_EXTRAS_LEFT_OUT if n in sys.modules)
from monai.inferers import sliding_window_inference  # what segpipe uses of MONAI works
import matplotlib.figure  # the packages themselves still import
print(json.dumps({{"first": first, "again": again, "loaded": loaded, "monai": "monai.inferers" in sys.modules}}))
"""


def _probe(patch: str = "") -> dict:
    proc = subprocess.run([sys.executable, "-c", PROBE.format(patch=patch)], check=False, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def test_monai_imports_without_the_packages_left_out() -> None:
    got = _probe()
    assert got == {"first": True, "again": False, "loaded": [], "monai": True}


def test_a_monai_that_needs_a_left_out_package_is_imported_as_usual() -> None:
    # as if a MONAI version imported one of them without its optional-import guard
    got = _probe('settings.MONAI_EXTRAS_LEFT_OUT = ("monai.utils",)')
    assert got == {"first": False, "again": False, "loaded": ["monai.utils"], "monai": True}
