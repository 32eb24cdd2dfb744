"""Lungs, airways, pulmonary vessel trees and lung pathology of a phantom (canonical mm frame).

Each lung is the thoracic cavity on its side of the midline, under an apical dome and above the
diaphragm, minus the mediastinum (grown copies of the heart, great vessels, esophagus, spine...).
Vessel trees grow from each hilum by recursively splitting a cloud of target points spread
through the lung (radius shrinking by Murray's law); bronchi run beside the larger arteries.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from segpipe.synthetic.anatomy import Body
from segpipe.synthetic.fields import SmoothField, SumField
from segpipe.synthetic.shapes import (
    F32,
    INF,
    TISSUES,
    Capsule,
    CapsuleSet,
    Ellipsoid,
    Grid,
    HalfSpace,
    Implicit,
    Intersect,
    Item,
    Scaled,
    Shape,
    Subtract,
    Union,
    smooth_path,
    tube,
)

T = TISSUES
SIDES = (("right", -1), ("left", 1))


@dataclass
class LungParts:
    """Items in painting order around the lungs, plus what tests and users may want to know."""

    lungs: list[Item] = field(default_factory=list)      # parenchyma (modes lung_right / lung_left)
    in_lung: list[Item] = field(default_factory=list)    # vessels, bronchi, nodules... (inside the lungs)
    carve_first: list[Item] = field(default_factory=list)  # effusion, pneumothorax (before the mediastinum)
    carve_last: list[Item] = field(default_factory=list)   # trachea and main bronchi (after the bones)
    boxes: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)
    info: dict = field(default_factory=dict)


def _coarse_points(shape: Shape, lo: np.ndarray, hi: np.ndarray, cell: float, rng: np.random.Generator):
    """Voxel centres (jittered) of a coarse grid over lo..hi with their occupancy of ``shape``."""
    vec = [np.arange(lo[i] + cell / 2, hi[i], cell, dtype=F32) for i in range(3)]
    g = Grid(vec[0], vec[1], vec[2], (cell, cell, cell))
    occ = np.asarray(shape.occupancy(g))
    zz, yy, xx = np.meshgrid(vec[2], vec[1], vec[0], indexing="ij")
    pts = np.stack([xx, yy, zz], axis=-1).reshape(-1, 3).astype(float)
    pts += rng.uniform(-cell / 2, cell / 2, pts.shape)
    return pts, occ.reshape(-1)


def grow_tree(rng: np.random.Generator, root: np.ndarray, direction: np.ndarray, targets: np.ndarray,
              r_root: float, r_leaf: float = 0.45) -> list[tuple[np.ndarray, np.ndarray, float, float]]:
    """Space-filling tree from ``root`` reaching every target point (N, 3).

    Each node walks most of the way toward the centroid of its targets (keeping some of its
    parent's direction, so branches are long and smooth), then splits them in two by the
    direction in which they lie seen from there; children get radius
    ``r * (n_child / n) ** (1 / 2.7)`` (Murray's law, flow proportional to the targets fed).

    Returns:
        Segments ``(a, b, r_a, r_b)`` in mm.
    """
    n_all = len(targets)
    segs: list[tuple[np.ndarray, np.ndarray, float, float]] = []
    stack = [(np.asarray(root, float), np.asarray(direction, float) / np.linalg.norm(direction), np.arange(n_all), r_root)]
    while stack:
        start, d, idx, r = stack.pop()
        pts = targets[idx]
        if len(idx) == 1:
            segs.append((start, pts[0], r, max(r_leaf, 0.8 * r)))
            continue
        c = pts.mean(axis=0)
        v = c - start
        dist = float(np.linalg.norm(v)) + 1e-6
        nd = 0.65 * v / dist + 0.35 * d
        nd /= np.linalg.norm(nd)
        step = float(np.clip(rng.uniform(0.5, 0.8) * dist, 1.5, 60.0))
        end = start + step * nd
        segs.append((start, end, r, r * 0.96))
        q = pts - end
        u = q / (np.linalg.norm(q, axis=1, keepdims=True) + 1e-6)
        u -= (u @ nd)[:, None] * nd[None, :]
        axis = np.linalg.svd(u - u.mean(axis=0), full_matrices=False)[2][0] if len(idx) > 2 else u[0] - u[1]
        order = np.argsort(u @ axis)
        cut = int(np.clip(round(len(idx) * rng.uniform(0.25, 0.75)), 1, len(idx) - 1))
        for part in (order[:cut], order[cut:]):
            rc = r * (len(part) / len(idx)) ** (1 / 2.7)
            stack.append((end, nd, idx[part], max(rc, r_leaf)))
    return segs


def build_lungs(b: Body, rng: np.random.Generator) -> LungParts:
    """Lungs, airways, vessels and pathology for the body ``b``; pathology drawn from ``rng``
    with the probabilities in ``b.spec``."""
    L, S, spec = b.L, b.S, b.spec
    cav = b.cav
    out = LungParts()
    # ---- lung envelopes
    pleura = b.section(cav, L["lung_min"] - 5, L["apex"] + 15 * S, grow=-1.5 * S)
    # spine bodies protrude into the cavity: carve them (with a margin) out of the lungs
    spine = b.section(((lambda z: np.full(np.shape(z), 24 * S)),) * 2 + ((lambda z: np.full(np.shape(z), 90 * S)),)
                      + (b.spine_y,),
                      L["lung_min"] - 10, L["apex"] + 20 * S)
    # the rib necks behind the lungs' paravertebral gutters, bridged by intercostal membranes
    necks = b.section(((lambda z: np.full(np.shape(z), 40 * S)), (lambda z: np.full(np.shape(z), 12 * S)),
                       (lambda z: np.full(np.shape(z), 60 * S)), (lambda z: b.spine_y(z) + 24 * S)),
                      L["lung_min"] - 10, L["apex"] + 20 * S)
    cutters = list(b.cutters) + [spine, necks]
    lungs: dict[str, Shape] = {}
    # inspiration CTs of real lungs sit at about -850 to -930 HU (the COPDGene check case: median
    # -911 at 4 mm); the range reaches down there so a model trained on phantoms has seen it
    lung_hu = -790 - 140 * spec.breathing + rng.normal(0, 20)
    emphysema = rng.random() < spec.emphysema
    if emphysema:
        lung_hu -= rng.uniform(15, 45)
    out.info["lung_base_hu"] = float(lung_hu)
    for name, sx in SIDES:
        # apical dome: an ellipsoid cap whose base (at cz) is wider than the cavity, so the lung
        # narrows smoothly toward its apex
        cx, cy, az = sx * 52 * S, 24 * S, 110 * S
        cz = L["apex"] - az
        ax, ay = 78 * S, 90 * S

        def cap_fn(g: Grid, cx=cx, cy=cy, cz=cz, ax=ax, ay=ay, az=az):
            dz = np.maximum(g.z - F32(cz), 0)[:, None, None]
            big = (g.z < cz)[:, None, None]
            u, v = (g.X - F32(cx)) / F32(ax), (g.Y - F32(cy)) / F32(ay)
            f = u * u + v * v + (dz / F32(az)) ** 2 - F32(1.0)
            f = np.where(big, F32(-1.0), f)
            w = (np.abs(u) * F32(2 * g.spacing[0] / ax) + np.abs(v) * F32(2 * g.spacing[1] / ay)
                 + dz * F32(2 * g.spacing[2] / az**2))
            return f, w

        cap = Implicit(cap_fn, (-INF, -INF, -INF), (INF, INF, L["apex"] + 2))
        medial = HalfSpace((sx * 1.2, 0, 0), (-sx, 0, 0))
        base = Intersect(pleura, cap, b.above_diaphragm(), medial)
        lungs[name] = Subtract(base, *cutters)
    # bounding boxes and target points from a coarse evaluation
    pts_by_side: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for name, sx in SIDES:
        lo = np.array([-150 * S if sx < 0 else 0.0, -110 * S, L["lung_min"] - 5])
        hi = np.array([0.0 if sx < 0 else 150 * S, 130 * S, L["apex"] + 5])
        pts, occ = _coarse_points(lungs[name], lo, hi, 5.0, rng)
        inside = pts[occ > 0.01]
        blo, bhi = inside.min(axis=0) - 8, inside.max(axis=0) + 8
        out.boxes.append((blo, bhi))
        lungs[name].lo, lungs[name].hi = np.maximum(blo, lungs[name].lo), np.minimum(bhi, lungs[name].hi)
        pts_by_side[name] = (pts, occ)
    for name, _sx in SIDES:
        lo, hi = lungs[name].lo, lungs[name].hi
        par = SumField(b.tex(10), b.tex(12, fine=True), base=lung_hu, grad=(0, rng.uniform(0.12, 0.3), 0),
                       origin=(0, 10 * S, 0))
        out.lungs.append(Item(f"{name}_lung", lungs[name], par, f"lung_{name}", T["lung"]))
    # ---- pathology that lowers or raises lung density under the vessels
    pre: list[Item] = []
    post: list[Item] = []
    info = out.info
    if emphysema:
        info["emphysema"] = _emphysema(pts_by_side, lungs, rng, S, pre)
    if rng.random() < spec.ground_glass:
        info["ground_glass"] = _blobs(pts_by_side, rng, S, pre, "ground_glass", (15, 45), (-720, -450), 0.9)
    # ---- vessels and bronchi
    art_hu = b.hu_blood
    vein_hu = b.hu_blood * (0.85 if spec.contrast else 1.0)
    walls: list[Item] = []
    lumens: list[Item] = []
    arteries: dict[str, list] = {}
    for name, sx in SIDES:
        pts, occ = pts_by_side[name]
        deep = pts[occ > 0.99]
        for kind, hu, n, r0 in (("artery", art_hu, 1100, 7.5 * S), ("vein", vein_hu, 800, 6.8 * S)):
            root = b.hilum[f"{name}_{kind}"]
            tg = deep[rng.choice(len(deep), size=min(n, len(deep)), replace=False)]
            segs = grow_tree(rng, root, np.array([sx, 0.2, -0.2 if kind == "vein" else 0.1]), tg, r0)
            post.append(Item(f"{name}_{kind}_tree", _capsule_set(segs), hu, "in_lung", T["vessel"]))
            if kind == "artery":
                arteries[name] = segs
                _bronchi(segs, sx, walls, lumens)
    # ---- pathology painted over the vessels
    if rng.random() < spec.consolidation:
        info["consolidation"] = _consolidation(b, pts_by_side, arteries, rng, post, spec.whole_lobe)
    if rng.random() < spec.effusion:
        info["effusion"] = _effusion(b, lungs, rng, post, out.carve_first)
    if rng.random() < spec.collapse:
        info["collapse"] = _collapse(b, lungs, rng, post, out.carve_first)
    if rng.random() < spec.nodules:
        info["nodules"] = _nodules(pts_by_side, rng, post)
    out.in_lung = pre + post + walls + lumens
    # ---- trachea and main bronchi (not lung)
    yt0 = b.trachea_y(0.0)
    zt = np.linspace(L["neck_top"] + 30, 0.0, 12)
    trachea = np.array([(0.0, b.trachea_y(z), z) for z in zt])
    r_tr = (7.5 if spec.female else 8.5) * S * rng.normal(1, 0.06)
    rmb = smooth_path(np.array([(0, yt0, 0), (-22 * S, yt0 + 4 * S, -16 * S), (-38 * S, yt0 + 8 * S, -32 * S)]), 5)
    lmb = smooth_path(np.array([(0, yt0, 0), (26 * S, yt0 + 6 * S, -20 * S), (46 * S, yt0 + 12 * S, -34 * S)]), 6)
    wall_hu = float(rng.uniform(20, 70))
    airway = [(trachea, r_tr, r_tr), (rmb, r_tr * 0.85, r_tr * 0.7), (lmb, r_tr * 0.75, r_tr * 0.65)]
    for path, r0, r1 in airway:
        for cap in tube(path, np.linspace(r0, r1, len(path)) + 2.0 * S):
            out.carve_last.append(Item("airway_wall", cap, wall_hu, "carve", T["soft_tissue"]))
    for path, r0, r1 in airway:
        for cap in tube(path, np.linspace(r0, r1, len(path))):
            out.carve_last.append(Item("airway", cap, -1000.0, "carve", T["airway"]))
    info["airway_centreline_mm"] = np.vstack([trachea, rmb, lmb]).tolist()
    return out


def _capsule_set(segs) -> CapsuleSet:
    return CapsuleSet(np.array([s[0] for s in segs]), np.array([s[1] for s in segs]),
                      np.array([s[2] for s in segs]), np.array([s[3] for s in segs]))


def _bronchus_capsules(segs, sx: int, r_min: float, r_max: float = INF) -> tuple[list[Capsule], list[Capsule]]:
    """Bronchi (lumens, walls) beside the artery segments of radius ``r_min`` .. ``r_max`` mm at
    their start: lumen ~0.8 of the artery, wall 0.12 of the lumen + 0.45 mm, on the artery's
    lateral side (``sx``: -1 right, +1 left)."""
    lumens: list[Capsule] = []
    walls: list[Capsule] = []
    for a, c, ra, rb in segs:
        if not r_min <= ra < r_max:
            continue
        d = c - a
        n = np.linalg.norm(d)
        if n < 1e-3:
            continue
        p = np.cross(d / n, (0.0, 0.0, 1.0) if abs(d[2] / n) < 0.9 else (1.0, 0.0, 0.0))
        p = p / np.linalg.norm(p) * sx
        lr = 0.8 * ra
        wall = 0.12 * lr + 0.45
        off = p * (ra + lr + wall + 0.3)
        walls.append(Capsule(a + off, c + off, lr + wall, 0.8 * rb + wall))
        lumens.append(Capsule(a + off, c + off, lr, 0.8 * rb))
    return lumens, walls


def _bronchi(segs, sx: int, walls: list[Item], lumens: list[Item]) -> None:
    """Bronchi beside the arteries thicker than about 1.6 mm (lumen ~0.85 of the artery)."""
    lumen_caps, wall_caps = _bronchus_capsules(segs, sx, 2.4)
    if wall_caps:
        walls.append(Item("bronchus_wall", CapsuleSet.from_capsules(wall_caps), 30.0, "in_lung", T["soft_tissue"]))
        lumens.append(Item("bronchus", CapsuleSet.from_capsules(lumen_caps), -1000.0, "in_lung", T["bronchus"]))


def _pick(pts_by_side, rng, side: str | None = None, lo: float = 0.99, hi: float = 1.01):
    side = side or ("right" if rng.random() < 0.5 else "left")
    pts, occ = pts_by_side[side]
    cand = pts[(occ >= lo) & (occ <= hi)]
    return side, cand[rng.integers(len(cand))]


def _nodules(pts_by_side, rng, items: list[Item]) -> list[dict]:
    found = []
    for _ in range(1 + min(int(rng.poisson(1.0)), 6)):
        kind = str(rng.choice(["solid", "subsolid", "calcified"], p=[0.65, 0.2, 0.15]))
        r = float(np.clip(rng.lognormal(np.log(5.0), 0.5), 2.5, 16)) if kind != "calcified" else float(rng.uniform(1.5, 4))
        pleural = rng.random() < 0.25
        side, c = _pick(pts_by_side, rng, lo=0.3 if pleural else 0.99, hi=0.9 if pleural else 1.01)
        parts = [Ellipsoid(c, r * rng.uniform(0.8, 1.2, 3))]
        for _ in range(int(rng.integers(0, 3))):
            parts.append(Ellipsoid(c + rng.normal(0, 0.5 * r, 3), r * rng.uniform(0.4, 0.8, 3)))
        shape = Union(*parts)
        if kind == "subsolid":
            items.append(Item("nodule_halo", Union(*[Ellipsoid(p.c, p.r * 1.6) for p in parts]),
                              SmoothField(rng, c - 3 * r, c + 3 * r, 3, 40, rng.uniform(-650, -450)), "in_lung",
                              T["nodule"]))
            shape = Ellipsoid(c, np.full(3, r * 0.5))
        hu = SmoothField(rng, c - 2 * r, c + 2 * r, 2.5, 12, rng.uniform(300, 800) if kind == "calcified"
                         else rng.uniform(10, 60))
        items.append(Item("nodule", shape, hu, "in_lung", T["nodule"]))
        found.append({"centre_mm": c.tolist(), "radius_mm": r, "side": side, "kind": kind, "pleural": bool(pleural)})
    return found


def _blobs(pts_by_side, rng, S: float, items: list[Item], name: str, radius: tuple, hu: tuple, alpha: float) -> list[dict]:
    found = []
    for _ in range(int(rng.integers(1, 3))):
        side, c = _pick(pts_by_side, rng)
        parts = [Ellipsoid(c + rng.normal(0, radius[0] * 0.6, 3) * (i > 0), rng.uniform(*radius, 3) * S)
                 for i in range(int(rng.integers(2, 5)))]
        lo, hi = np.min([p.lo for p in parts], axis=0), np.max([p.hi for p in parts], axis=0)
        field_hu = SmoothField(rng, lo, hi, 6, 18, rng.uniform(*hu))
        items.append(Item(name, Union(*parts), field_hu, "in_lung", T[name], alpha))
        found.append({"centre_mm": c.tolist(), "side": side})
    return found


def _consolidation(b: Body, pts_by_side, arteries: dict[str, list], rng, items: list[Item],
                   whole_lobe: float = 0.0) -> list[dict]:
    """Airspace consolidation: lung whose alveoli are filled (lung label), 1-2 regions.

    What tells it apart from a pleural effusion (fluid outside the lung, dependent, 0-20 HU,
    meniscus-shaped with compressed lung above it), as in real scans:

    - *lobar/segmental* regions (half of them, 30-60 mm lobules) end on a fissure: a plane
      through the hilum (oblique fissure ~35-60 degrees from the axial plane; the right
      horizontal fissure at the hilum's height), the rest of their edge lobulated; *patchy*
      ones (bronchopneumonia) are clusters of 5-10 lobule-sized foci (10-26 mm) in the
      dependent lung, with an irregular outline; a share ``whole_lobe`` of the lobar ones fill
      the whole lobe out to the pleura and the diaphragm (lobar pneumonia), without a rim;
    - most (80 %) fade into the aerated lung through a 4-10 mm ground-glass rim (-650..-350 HU,
      partly transparent: partly filled alveoli), except along a fissure, which stays sharp;
    - denser than fluid, less dense than liver and spleen: 15-40 HU, 10-25 HU more on
      contrast scans, where the vessels inside still enhance (the CT angiogram sign);
    - air bronchograms: air-filled bronchi of 0.7-2 mm (beside the arteries, as the larger
      bronchi) crossing the region, in most (85 %) of them.
    """
    S = b.S
    found = []
    for _ in range(int(rng.integers(1, 3))):
        side = "right" if rng.random() < 0.5 else "left"
        pts, occ = pts_by_side[side]
        inner = pts[occ > 0.99]
        hil = b.hilum[f"{side}_artery"]
        lobar = rng.random() < 0.5
        planes: list[HalfSpace] = []
        if lobar:
            lobe = str(rng.choice(["lower", "upper", "middle"], p=[0.6, 0.25, 0.15]))
            t = np.tan(np.radians(rng.uniform(35, 60)))
            # oblique fissure: z - z_h = t (y - y_h); the lower lobe lies behind and below it
            oblique = np.array([0.0, -t, 1.0])
            if lobe == "lower":
                planes.append(HalfSpace(hil, oblique))
            else:
                planes.append(HalfSpace(hil, -oblique))
                # the horizontal fissure (right) / the lingula's lower edge (left) at the hilum
                planes.append(HalfSpace(hil + (0, 0, 5 * S), (0, 0, -1.0 if lobe == "upper" else 1.0)))
            rel = inner - hil
            keep = np.ones(len(inner), bool)
            for pl in planes:
                keep &= (rel @ pl.n) <= -5.0
            cand = inner[keep] if keep.sum() > 20 else inner
        else:
            lobe = "patchy"
            cand = inner[(inner[:, 1] > np.percentile(inner[:, 1], 55)) & (inner[:, 2] < np.percentile(inner[:, 2], 50))]
            cand = cand if len(cand) else inner
        c = cand[rng.integers(len(cand))]
        whole = lobar and whole_lobe > 0 and rng.random() < whole_lobe  # no draw when off: phantoms stay as they were
        if whole:  # the lobe's part of the lung, all of it ("in_lung" keeps it inside the lung)
            lo_all, hi_all = pts.min(axis=0), pts.max(axis=0)
            parts = [Ellipsoid((lo_all + hi_all) / 2, (hi_all - lo_all) + 10 * S)]
        else:
            # lobar: 2-4 large lobules; patchy: a cluster of 5-10 lobule-sized foci (irregular outline)
            spread, radius, count = (15, (30, 60), (2, 5)) if lobar else (16, (10, 26), (5, 11))
            parts = [Ellipsoid(c + rng.normal(0, spread * S, 3) * (i > 0), rng.uniform(*radius, 3) * S)
                     for i in range(int(rng.integers(*count)))]

        def on_lobe_side(shape: Shape) -> Shape:
            return Intersect(shape, *planes) if planes else shape  # noqa: B023 (called at once, in this iteration)

        region = on_lobe_side(Union(*parts))
        margin = rng.random() < 0.8 and not whole
        if margin:  # partly filled alveoli around it: a ground-glass rim (the fissure stays sharp)
            grow = float(rng.uniform(4, 10) * S)
            rim_shape = on_lobe_side(Union(*(Ellipsoid(q.c, q.r + grow) for q in parts)))
            items.append(Item("consolidation_margin", rim_shape,
                              SmoothField(rng, rim_shape.lo, rim_shape.hi, 5, 60, rng.uniform(-650, -350)), "in_lung",
                              T["ground_glass"], float(rng.uniform(0.5, 0.9))))
        lo, hi = region.lo, region.hi
        hu = float(rng.uniform(*((20, 50) if whole else (15, 40)))) + (float(rng.uniform(10, 25)) if b.contrast else 0.0)
        items.append(Item("consolidation", region, SmoothField(rng, lo, hi, 6, 12, hu), "in_lung", T["consolidation"]))
        segs = [s for s in arteries[side]
                if np.all(np.minimum(s[0], s[1]) < hi) and np.all(np.maximum(s[0], s[1]) > lo)]
        if b.contrast and segs:  # enhancing vessels inside the consolidation
            items.append(Item("consolidation_vessels", Intersect(_capsule_set(segs), region), b.hu_blood, "in_lung",
                              T["vessel"]))
        bronchogram = rng.random() < 0.85
        caps = _bronchus_capsules(segs, -1 if side == "right" else 1, 0.9, 2.4)[0] if bronchogram else []
        if caps:
            items.append(Item("air_bronchogram", Intersect(CapsuleSet.from_capsules(caps), region),
                              float(rng.uniform(-1000, -900)), "in_lung", T["bronchus"]))
        found.append({"centre_mm": c.tolist(), "side": side, "lobe": lobe, "whole_lobe": whole, "hu": hu, "air_bronchogram": bronchogram,
                      "margin": margin,
                      "fissures": [{"point_mm": pl.p.tolist(), "normal": pl.n.tolist()} for pl in planes]})
    return found


def _emphysema(pts_by_side, lungs, rng, S: float, items: list[Item]) -> dict:
    n_holes = int(rng.integers(80, 400))
    holes = []
    for _ in range(n_holes):
        side, c = _pick(pts_by_side, rng)
        pts, occ = pts_by_side[side]
        if c[2] < np.percentile(pts[occ > 0.99, 2], 30) and rng.random() < 0.8:
            continue  # centrilobular emphysema favours the upper lobes
        holes.append(c)
        items.append(Item("emphysema", Ellipsoid(c, rng.uniform(1.5, 5.0, 3) * S), float(rng.uniform(-1000, -975)),
                          "in_lung", T["emphysema"]))
    bullae = []
    for _ in range(int(rng.integers(0, 4))):
        side, c = _pick(pts_by_side, rng, lo=0.4, hi=0.95)
        r = float(rng.uniform(10, 30) * S)
        items.append(Item("bulla_wall", Ellipsoid(c, np.full(3, r + 1.2)), -300.0, "in_lung", T["emphysema"]))
        items.append(Item("bulla", Ellipsoid(c, np.full(3, r)), -1000.0, "in_lung", T["emphysema"]))
        bullae.append({"centre_mm": c.tolist(), "radius_mm": r, "side": side})
    # confluent low-attenuation areas without walls (panlobular, and paraseptal under the
    # pleura): lobule-to-segment sized regions at -990..-945 HU that the vessels still cross,
    # anywhere including the dependent lower lobes. Real COPD scans have them (the COPDGene
    # check case: dark posterior patches in the left lower lobe, next to the pleura); without
    # them a model takes dark lung next to the chest wall for a pneumothorax
    confluent = []
    for _ in range(int(rng.integers(2, 9))):
        subpleural = rng.random() < 0.5
        side, c = _pick(pts_by_side, rng, lo=0.3 if subpleural else 0.99, hi=0.9 if subpleural else 1.01)
        r = rng.uniform(6, 20) * S
        parts = [Ellipsoid(c + rng.normal(0, 0.5 * r, 3) * (i > 0), r * rng.uniform(0.5, 1.0, 3))
                 for i in range(int(rng.integers(1, 4)))]
        lo, hi = np.min([q.lo for q in parts], axis=0), np.max([q.hi for q in parts], axis=0)
        items.append(Item("emphysema", Union(*parts), SmoothField(rng, lo, hi, 6, 12, rng.uniform(-985, -950)),
                          "in_lung", T["emphysema"], float(rng.uniform(0.7, 1.0))))
        confluent.append({"centre_mm": c.tolist(), "radius_mm": float(r), "side": side, "subpleural": subpleural})
    return {"holes": len(holes), "bullae": bullae, "confluent": confluent}


def _effusion(b: Body, lungs, rng, atelectasis: list[Item], carve: list[Item]) -> dict:
    L, S = b.L, b.S
    sides = ["right", "left"] if rng.random() < 0.3 else [str(rng.choice(["right", "left"]))]
    found = {"sides": sides, "points_mm": []}
    for side in sides:
        d0 = float(rng.uniform(15, 70) * S)
        z_top = L["domeR"] + rng.uniform(40, 140) * S
        band = float(rng.uniform(4, 12))

        def level(z, d0=d0, z_top=z_top):
            c = b.cav(z)
            t = np.clip((z_top - z) / max(z_top - L["lung_min"], 1.0), 0.05, 1.0)
            return c[..., 3] + c[..., 2] - d0 * t**0.6

        def fn(g: Grid, extra: float = 0.0, level=level, z_top=z_top):
            f = F32(1.0) * (level(g.z)[:, None, None].astype(F32) - F32(extra) - g.Y)
            f = np.where((g.z > z_top)[:, None, None], F32(1e3), f)
            return f, F32(g.spacing[1] + 0.5 * g.spacing[2])

        fluid = Intersect(lungs[side], Implicit(fn, (-INF, -INF, -INF), (INF, INF, z_top)))
        atel = Intersect(lungs[side], Implicit(lambda g, fn=fn, band=band: fn(g, band), (-INF, -INF, -INF),
                                               (INF, INF, z_top)))
        atelectasis.append(Item("atelectasis", atel, float(rng.uniform(-450, -150)), "in_lung", T["atelectasis"]))
        carve.append(Item("effusion", fluid, SmoothField(rng, lungs[side].lo, lungs[side].hi, 10, 4,
                                                         rng.uniform(2, 22)), "carve", T["effusion"]))
        zp = L["lung_min"] + 8 * S
        x = (-1 if side == "right" else 1) * 95 * S
        found["points_mm"].append([x, float(level(zp)) + min(d0, 15) * 0.5, zp])
    return found


def _collapse(b: Body, lungs, rng, dense: list[Item], carve: list[Item]) -> dict:
    side = str(rng.choice(["right", "left"]))
    hilum = b.hilum[f"{side}_artery"]
    k = (float(rng.uniform(0.5, 0.8)), float(rng.uniform(0.65, 0.9)), float(rng.uniform(0.65, 0.9)))
    small = Scaled(lungs[side], hilum, k)
    small.lo, small.hi = np.maximum(small.lo, lungs[side].lo), np.minimum(small.hi, lungs[side].hi)
    pneumo = rng.random() < 0.6
    dense.append(Item("collapsed_lung", small, SmoothField(rng, small.lo, small.hi, 8, 25, rng.uniform(-550, -250)),
                      "in_lung", T["atelectasis"], float(rng.uniform(0.6, 1.0))))
    carve.append(Item("pneumothorax" if pneumo else "hydrothorax", Subtract(lungs[side], small),
                      -1000.0 if pneumo else float(rng.uniform(0, 20)), "carve",
                      T["pneumothorax"] if pneumo else T["effusion"]))
    return {"side": side, "factor_xyz": list(k), "kind": "pneumothorax" if pneumo else "hydrothorax"}
