"""Bones of the phantom: spine, ribs with costal cartilage, sternum, clavicles, scapulae,
humeral heads and pelvis. Cortical shells (HU 700+) around cancellous bone (about 250 HU)."""

from __future__ import annotations

import numpy as np

from segpipe.synthetic.anatomy import Body, Profile
from segpipe.synthetic.shapes import (
    F32,
    Capsule,
    CapsuleSet,
    Ellipsoid,
    Grid,
    HalfSpace,
    Implicit,
    Intersect,
    smooth_path,
    tube,
)


def _bone(b: Body, name: str, outer, inner, cortical: float, cancellous) -> None:
    b.add(name, outer, cortical, "cortical_bone", post=True)
    if inner is not None:
        b.add(name + "_cancellous", inner, cancellous, "cancellous_bone", post=True)


def _tube_bone(b: Body, name: str, path: np.ndarray, radii, cortical: float, cancellous, wall: float,
               collect: list | None = None) -> None:
    """A tubular bone: cortical tube, cancellous core; ``collect`` gathers (outer, inner) capsule
    lists instead of adding items (to batch many bones into two items)."""
    r = np.broadcast_to(np.asarray(radii, float), (len(path),))
    outer = tube(path, r)
    inner = tube(path, r - wall) if np.all(r - wall > 0.8) else []
    if collect is not None:
        collect[0].extend(outer)
        collect[1].extend(inner)
        return
    b.add(name, CapsuleSet.from_capsules(outer), cortical, "cortical_bone", post=True)
    if inner:
        b.add(name + "_cancellous", CapsuleSet.from_capsules(inner), cancellous, "cancellous_bone", post=True)


def _shell(a_fn, b_fn, yc_fn, thick: float, lo, hi, xc: float = 0.0) -> Implicit:
    """Thin curved plate: the band of half-width thick/2 around the ellipse (a(z), b(z), yc(z))
    centred at x = xc."""

    def fn(g: Grid):
        a = np.asarray(a_fn(g.z), F32)[:, None, None]
        bb = np.asarray(b_fn(g.z), F32)[:, None, None]
        yc = np.asarray(yc_fn(g.z), F32)[:, None, None]
        u, v = (g.X - F32(xc)) / a, (g.Y - yc) / bb
        q = np.sqrt(u * u + v * v)
        f = np.abs(q - F32(1.0)) * bb - F32(thick / 2)
        return f, F32(g.spacing[0] + g.spacing[1]) * F32(0.75)

    return Implicit(fn, lo, hi)


def build_skeleton(b: Body) -> None:
    """Add all bones to ``b`` (after the lungs, carving them)."""
    L, S, rng = b.L, b.S, b.rng
    age = float(rng.uniform(0, 1))  # older: less dense cancellous bone, calcified cartilage
    cort = float(rng.uniform(750, 1100))
    canc_mean = float(300 - 140 * age + rng.normal(0, 20))
    canc = b.tex(35, canc_mean, fine=True)
    yv = b.spine_y
    # ---- spine: levels from C1 to L5, then sacrum
    t_top, t_bot = L["apex"] + 12 * S, L["T12"]
    th = (t_top - t_bot) / 12
    levels = []  # (z_bottom, z_top, ra, rb)
    for i in range(7):  # cervical, from C7 upward
        z0 = t_top + i * 17 * S
        levels.append((z0, z0 + 17 * S, 10 * S, 8 * S))
    for i in range(12):  # thoracic T1..T12
        z1 = t_top - i * th
        levels.append((z1 - th, z1, (15 + 7 * i / 11) * S, (13 + 5 * i / 11) * S))
    for i in range(5):  # lumbar L1..L5
        z1 = t_bot - i * 33 * S
        levels.append((z1 - 33 * S, z1, (24 + i) * S, (18 + 0.5 * i) * S))
    self_rc = 8.5 * S
    for z0, z1, ra, rb in levels:
        h = z1 - z0
        hd = 0.2 * h
        y_of = lambda z, rb=rb: yv(z)  # noqa: E731
        prof = lambda grow, ra=ra, rb=rb, y_of=y_of: (  # noqa: E731
            (lambda z: np.full(np.shape(z), ra + grow)), (lambda z: np.full(np.shape(z), rb + grow)),
            (lambda z: np.full(np.shape(z), rb + grow)), y_of)
        b.add("disc", b.section(prof(0), z0, z0 + hd), float(rng.uniform(70, 100)), "cartilage", post=True)
        _bone(b, "vertebra", b.section(prof(0), z0 + hd, z1), b.section(prof(-1.6 * S), z0 + hd + 1.5 * S, z1 - 1.5 * S),
              cort, canc)
        yc_c = lambda z, rb=rb: yv(z) + rb + self_rc + 1.5 * S  # noqa: E731
        ring = (lambda z: np.full(np.shape(z), self_rc + 5.5 * S),) * 3 + (yc_c,)
        b.add("vertebral_arch", b.section(ring, z0 + hd + 0.1 * h, z1 - 0.1 * h), cort * 0.75, "cortical_bone",
              post=True)
        zm = z1 - 0.35 * h
        ycm = float(yc_c(zm))
        b.add("spinous_process", Capsule((0, ycm + self_rc + 3 * S, z1 - 0.3 * h),
                                         (0, ycm + self_rc + 24 * S, z1 - 0.95 * h), 4.5 * S), cort * 0.8,
              "cortical_bone", post=True)
        span = 22 * S if ra > 12 * S else 12 * S
        for sx in (-1, 1):
            b.add("transverse_process", Capsule((sx * (self_rc + 3 * S), ycm + 2 * S, zm),
                                                (sx * (self_rc + span), ycm + 12 * S, zm), 4.5 * S), cort * 0.8,
                  "cortical_bone", post=True)
    z_l5 = t_bot - 5 * 33 * S
    rb_of = Profile([((z0 + z1) / 2, rb) for z0, z1, _, rb in levels])
    canal = ((lambda z: np.full(np.shape(z), self_rc)),) * 3 + (lambda z: yv(z) + rb_of(z)[..., 0] + self_rc + 1.5 * S,)
    b.add("spinal_canal", b.section(canal, z_l5 - 10 * S, L["neck_top"] + 40), float(rng.uniform(15, 35)),
          "soft_tissue", post=True)
    sac = Profile([(z_l5, 48 * S, 22 * S), (L["pubis"] + 15 * S, 18 * S, 12 * S)])
    sac_sec = lambda grow: (lambda z: sac(z)[..., 0] + grow, lambda z: sac(z)[..., 1] + grow,  # noqa: E731
                            lambda z: sac(z)[..., 1] + grow, lambda z: yv(z) + 10 * S)
    _bone(b, "sacrum", b.section(sac_sec(0), L["pubis"] + 15 * S, z_l5),
          b.section(sac_sec(-2 * S), L["pubis"] + 17 * S, z_l5 - 2), cort, canc)
    # ---- sternum
    cav = b.cav
    z_m0, z_m1, z_x = L["apex"] - 72 * S, L["apex"] - 25 * S, L["domeR"] + 18 * S
    y_st = lambda z: cav(z)[..., 3] - cav(z)[..., 1] - 9 * S  # noqa: E731
    st = Profile([(z_x, 10 * S, 6 * S), (z_m0 - 5, 16 * S, 7 * S), (z_m0 + 5, 22 * S, 8 * S), (z_m1, 26 * S, 8 * S)])
    st_sec = lambda grow: (lambda z: st(z)[..., 0] + grow, lambda z: st(z)[..., 1] + grow,  # noqa: E731
                           lambda z: st(z)[..., 1] + grow, y_st)
    _bone(b, "sternum", b.section(st_sec(0), z_x, z_m1), b.section(st_sec(-1.5 * S), z_x + 1.5, z_m1 - 1.5), cort * 0.8,
          canc)
    # ---- ribs and costal cartilage
    drops = np.array([28, 50, 72, 88, 96, 100, 100, 96, 88, 72, 45, 28]) * S * rng.normal(1, 0.06)
    ends = np.array([0.72, 0.78, 0.8, 0.8, 0.8, 0.8, 0.78, 0.72, 0.68, 0.62, 0.45, 0.32]) * np.pi
    cart_ends = np.array([0.95, 0.96, 0.96, 0.96, 0.95, 0.93, 0.9, 0.85, 0.8, 0.72]) * np.pi
    cart_hu = float(rng.uniform(90, 160) + 150 * age * (rng.random() < 0.5))
    ribs: tuple[list, list] = ([], [])
    cartilage: list = []
    for k in range(12):
        z_head = t_top - (k + 0.3) * th
        r_rib = (4.2 + 0.15 * min(k, 7)) * S
        for sx in (-1, 1):
            yh = float(yv(z_head))
            pts = [(sx * (17 + 2 * k / 11) * S, yh + 9 * S, z_head), (sx * 36 * S, yh + 31 * S, z_head + 2 * S)]
            c0 = cav(z_head)
            th0 = float(np.arcsin(min(0.9, 52 * S / (c0[0] + r_rib))))
            thetas = np.linspace(th0, ends[k], 16)
            for th_ in thetas:
                t = (th_ - thetas[0]) / (ends[k] - thetas[0])
                z = z_head - drops[k] * (0.6 * t + 0.4 * t * t) * ends[k] / (0.8 * np.pi)
                c = cav(z)
                off = r_rib + 1.8 * S
                bb = (c[2] if np.cos(th_) > 0 else c[1]) + off
                pts.append((sx * (c[0] + off) * np.sin(th_), c[3] + bb * np.cos(th_), z))
            path = np.array(pts)
            _tube_bone(b, "rib", path, np.linspace(r_rib, r_rib * 0.85, len(path)), cort * 0.9, canc, 1.4 * S, ribs)
            if k < 10:
                z_end = path[-1, 2] + (8 if k < 7 else 18) * S
                tc = np.linspace(ends[k], cart_ends[k], 6)
                cp = []
                for i, th_ in enumerate(tc):
                    z = path[-1, 2] + (z_end - path[-1, 2]) * i / 5
                    c = cav(z)
                    off = r_rib + 1.8 * S
                    cp.append((sx * max((c[0] + off) * np.sin(th_), 14 * S), c[3] + (c[1] + off) * np.cos(th_), z))
                cartilage.extend(tube(np.array(cp), r_rib * 0.9))
    b.add("costal_cartilage", CapsuleSet.from_capsules(cartilage), cart_hu, "cartilage", post=True)
    b.add("rib", CapsuleSet.from_capsules(ribs[0]), cort * 0.9, "cortical_bone", post=True)
    b.add("rib_cancellous", CapsuleSet.from_capsules(ribs[1]), canc, "cancellous_bone", post=True)
    # ---- clavicles, scapulae, humeral heads
    mus = b.mus
    for sx in (-1, 1):
        zc = L["apex"] + 2 * S
        yf = float(cav(zc)[3] - cav(zc)[1])
        cl = smooth_path(np.array([(sx * 20 * S, float(y_st(z_m1)) - 2 * S, z_m1 + 2 * S),
                                   (sx * 70 * S, yf - 14 * S, L["apex"] + 4 * S),
                                   (sx * 125 * S, -5 * S, L["apex"] + 16 * S),
                                   (sx * 150 * S, 15 * S, L["apex"] + 18 * S)]), 12)
        _tube_bone(b, "clavicle", cl, np.linspace(7.5, 6, 12) * S, cort, canc, 1.8 * S)
        lo = (50 * S if sx > 0 else -140 * S, 0.0, L["apex"] - 140 * S)
        hi = (140 * S if sx > 0 else -50 * S, 200 * S, L["apex"] + 20 * S)
        shell = _shell(lambda z: cav(z)[..., 0] + 20 * S, lambda z: cav(z)[..., 2] + 36 * S,
                       lambda z: cav(z)[..., 3], 3.5 * S, lo, hi)
        scap = Intersect(shell, HalfSpace((sx * 55 * S, 0, 0), (-sx, 0, 0)), HalfSpace((sx * 135 * S, 0, 0), (sx, 0, 0)),
                         HalfSpace((0, 45 * S, 0), (0, -1, 0)), HalfSpace((0, 0, L["apex"] - 135 * S), (0, 0, -1)),
                         HalfSpace((0, 0, L["apex"] + 15 * S), (0, 0, 1)))
        b.add("scapula", scap, cort * 0.55, "cortical_bone", post=True)
        hh = np.array([sx * (float(mus(L["shoulder"])[0]) - 38 * S), 12 * S, L["shoulder"] - 12 * S])
        _bone(b, "humeral_head", Ellipsoid(hh, np.full(3, 23 * S)), Ellipsoid(hh, np.full(3, 21 * S)), cort, canc)
    # ---- pelvis
    zp, zi = L["pubis"], L["iliac"]
    for sx in (-1, 1):
        lo = (40 * S if sx > 0 else -140 * S, -60 * S, zp + 50 * S)
        hi = (140 * S if sx > 0 else -40 * S, 100 * S, zi + 15 * S)
        wing = lambda t, sx=sx, lo=lo, hi=hi: Intersect(  # noqa: E731
            _shell(lambda z: np.full(np.shape(z), 85 * S), lambda z: np.full(np.shape(z), 55 * S),
                   lambda z: np.full(np.shape(z), -5 * S), t, lo, hi, xc=sx * 30 * S),
            HalfSpace((sx * 45 * S, 0, 0), (-sx, 0, 0)), HalfSpace((0, -50 * S, 0), (0, -1, 0)),
            HalfSpace((sx * 52 * S, 0, 0), (-sx, -0.8, 0)),  # the wing flares laterally toward the front
            HalfSpace((0, 0, zp + 50 * S), (0, 0, -1)), HalfSpace((0, 0, zi + 15 * S), (0, 0, 1)))
        _bone(b, "iliac_wing", wing(9 * S), wing(5 * S), cort, canc)
        ac = np.array([sx * 90 * S, 0.0, zp + 35 * S])
        _bone(b, "acetabulum", Ellipsoid(ac, np.array([30, 32, 28]) * S), Ellipsoid(ac, np.array([27, 29, 25]) * S),
              cort, canc)
        fh = np.array([sx * 88 * S, -2 * S, zp + 22 * S])
        b.add("hip_joint", Ellipsoid(fh, np.full(3, 26 * S)), 70.0, "cartilage", post=True)
        _bone(b, "femoral_head", Ellipsoid(fh, np.full(3, 24 * S)), Ellipsoid(fh, np.full(3, 22 * S)), cort, canc)
        fem = np.array([fh, (sx * 118 * S, 0, zp - 10 * S), (sx * 120 * S, 5 * S, L["bottom"] - 60 * S)])
        _tube_bone(b, "femur", fem, [17 * S, 15 * S, 14 * S], cort, float(rng.uniform(-50, 80)), 4 * S)
        _tube_bone(b, "pubic_ramus", np.array([(sx * 80 * S, -25 * S, zp + 18 * S), (sx * 12 * S, -70 * S, zp)]),
                   10 * S, cort, canc, 2.5 * S)
        _tube_bone(b, "ischium", np.array([(sx * 85 * S, 15 * S, zp + 15 * S), (sx * 60 * S, 35 * S, zp - 25 * S)]),
                   12 * S, cort, canc, 2.5 * S)
