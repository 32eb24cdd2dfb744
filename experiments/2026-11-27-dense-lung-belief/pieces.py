"""Every piece that ``dense_lung`` (switched on) adds in phantom family B cases: its volume,
the share of it on the reference lung, and the fine network's lung probability averaged over it.

    python experiments/2026-11-27-dense-lung-belief/pieces.py 5000+16,26112+32,10000+64

(``BASE+N``: N cases from seed BASE, the kinds cycling as in ``benchmarks/family_b_score.py``.)
The pieces are the rule's without its ``min_network`` test (first run at 38fd71b, before the
test existed; the segmentation itself runs the rule as it is).
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import SimpleITK as sitk
from scipy import ndimage

sys.path.insert(0, "benchmarks")
import family_b  # noqa: E402

import segpipe.refine.dense_lung as dl  # noqa: E402
from segpipe import LungSegmenter, spatial  # noqa: E402
from segpipe.infer import fine  # noqa: E402
from segpipe.refine import rules  # noqa: E402

KINDS = ["chest", "chest_abdomen", "abdomen_bases", "apex", "cardiac", "fov_cut", "fov_circle", "no_lungs"]
state: dict[str, Any] = {}
pieces: list[dict[str, Any]] = []
_background, _run_once = fine.FineNetwork.background, fine._run_once


def background(self: Any, hu: np.ndarray) -> np.ndarray:
    state["bg"] = _background(self, hu)
    return state["bg"]


def run_once(region: Any, source: Any, geometry: Any, coarse: Any, net: Any, s: Any) -> Any:
    state["lattice"] = spatial.lattice_grid(geometry, s.fine_mm, region.context)
    return _run_once(region, source, geometry, coarse, net, s)


def rule(mask: np.ndarray, ctx: Any, p: Any) -> Any:
    """The rule as it is, recording each piece it adds."""
    added = dl.dense_lung(mask, ctx.coarse_prior(), ctx.hu, ctx.spacing_xyz, allowed=ctx.inside, p=p)
    labels, n = ndimage.label(added)
    for i in range(1, n + 1):
        piece = labels == i
        pieces.append({"ml": piece.sum() * ctx.voxel_ml, "belief": float(1.0 - state["bg"][piece].mean()),
                       "lattice": state["lattice"], "zyx": np.stack(np.nonzero(piece), 1)})
    return dl.rule(mask, ctx, p)


def on_reference(piece: dict[str, Any], ref: sitk.Image) -> float:
    """Share of the piece's voxels (lattice indices) whose nearest reference voxel is lung."""
    lat = piece["lattice"]
    o, sp, d = np.array(lat.GetOrigin()), np.array(lat.GetSpacing()), np.array(lat.GetDirection()).reshape(3, 3)
    phys = o + (piece["zyx"][:, ::-1] * sp) @ d.T
    ro, rs, rd = np.array(ref.GetOrigin()), np.array(ref.GetSpacing()), np.array(ref.GetDirection()).reshape(3, 3)
    idx = np.rint(((phys - ro) @ rd) / rs).astype(int)
    inside = np.all((idx >= 0) & (idx < np.array(ref.GetSize())), axis=1)
    arr = sitk.GetArrayViewFromImage(ref)
    on = np.zeros(len(idx), bool)
    on[inside] = arr[idx[inside, 2], idx[inside, 1], idx[inside, 0]] > 0
    return float(on.mean())


def main() -> None:
    fine.FineNetwork.background = background
    fine._run_once = run_once
    rules.STEPS = tuple(rules.dataclasses.replace(st, run=rule) if st.name == "dense_lung" else st for st in rules.STEPS)
    seg = LungSegmenter.default(rules={"dense_lung": True})
    todo = [(b + i, KINDS[i % 8]) for r in sys.argv[1].split(",") for b, n in [map(int, r.split("+"))] for i in range(n)]
    for seed, kind in todo:
        image, label, _ = family_b.make_case(seed, kind)
        pieces.clear()
        seg.predict_with_report(image)
        ref, _ = spatial.to_canonical(label)
        for piece in pieces:
            print(f"b{seed} {kind:13s} piece {piece['ml']:6.1f} mL on the reference {on_reference(piece, ref):.2f}"
                  f" network belief {piece['belief']:.3f}", flush=True)


if __name__ == "__main__":
    main()
