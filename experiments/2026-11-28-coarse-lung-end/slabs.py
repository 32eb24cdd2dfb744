"""The slab of slices the lung-end probes cut (canonical LPS: z index up = toward the head)."""


def end_slab(zz, sz: float, n: int, kind: str, cm: float, beyond: float) -> tuple[int, int]:
    """Slice range ``lo:hi`` of a slab over ``kind`` ("bases" or "apex") of the lungs whose
    slices are ``zz`` (``n`` slices of ``sz`` mm): ``cm`` of lung at that end and up to
    ``beyond`` cm past it (below the bases, above the apices)."""
    if kind == "bases":
        return max(int(zz.min() - beyond * 10 / sz), 0), int(zz.min() + cm * 10 / sz) + 1
    return int(zz.max() - cm * 10 / sz), min(int(zz.max() + beyond * 10 / sz) + 1, n)
