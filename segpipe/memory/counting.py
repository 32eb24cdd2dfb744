"""Counting tensor bytes: what autograd saves for backward, and every live tensor of a step."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

__all__ = ["SavedTensorMeter", "LiveTensorTracker"]


def _storage_key(t: torch.Tensor) -> tuple[int, int]:
    """(identity, bytes) of the storage behind ``t``; tensors without one (sparse...) stand alone."""
    try:
        storage = t.untyped_storage()
        return storage._cdata, storage.nbytes()
    except (RuntimeError, NotImplementedError):
        return id(t), t.numel() * t.element_size()


class _Attribution:
    """Which of the given modules is running (innermost); bytes seen outside any go to the next one."""

    def __init__(self, modules: Mapping[str, nn.Module]) -> None:
        self.modules = dict(modules)
        self.stack: list[str] = []
        self.pending = 0
        self.totals: dict[str, int] = {name: 0 for name in self.modules}
        self.totals["(outside)"] = 0
        self._handles: list[Any] = []

    def __enter__(self) -> _Attribution:
        self.stack.clear()
        for name, module in self.modules.items():
            self._handles.append(module.register_forward_pre_hook(self._pre(name)))
            self._handles.append(module.register_forward_hook(self._post(name), always_call=True))
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self.totals["(outside)"] += self.pending
        self.pending = 0

    def _pre(self, name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any) -> None:
            self.stack.append(name)
            if self.pending:  # e.g. inputs a checkpointed stage keeps: charge them to that stage
                self.totals[name] += self.pending
                self.pending = 0

        return hook

    def _post(self, name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            if self.stack and self.stack[-1] == name:
                self.stack.pop()

        return hook

    def add(self, nbytes: int) -> None:
        if self.stack:
            self.totals[self.stack[-1]] += nbytes
        else:
            self.pending += nbytes


class SavedTensorMeter:
    """Count the bytes autograd saves for backward inside a ``with`` block.

    Each storage counts once, however many times (or through however many views) it is saved.
    Parameters (leaf tensors that require grad, and views of them) are skipped: they are counted
    as parameters. Their autocast copies are not parameters and are counted.
    Tensors that checkpointed regions keep (their inputs) are seen too; what a checkpointed region
    saves internally is not kept, so it is not counted. Freed tensors are followed, so
    ``live_bytes``/``peak_bytes`` also work across several steps.

    Args:
        modules: optional ``{name: module}`` (or a module, meaning its direct children) to
            attribute saved bytes to: each storage is charged to the innermost running one.

    Example:
        >>> net = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
        >>> with SavedTensorMeter() as meter:
        ...     y = net(torch.ones(2, 4))
        >>> meter.saved_bytes  # the input (32 B) and the ReLU output (64 B)
        96
    """

    def __init__(self, modules: Mapping[str, nn.Module] | nn.Module | None = None) -> None:
        if isinstance(modules, nn.Module):
            modules = dict(modules.named_children())
        self._attribution = _Attribution(modules) if modules else None
        self._hooks: Any = None
        self._lock = threading.Lock()
        self._live: dict[int, list[int]] = {}
        self.saved_bytes = 0
        self.tensors = 0
        self.live_bytes = 0
        self.peak_bytes = 0

    @property
    def by_module(self) -> dict[str, int]:
        """Saved bytes per attributed module (``(outside)`` for the rest); empty without modules."""
        return dict(self._attribution.totals) if self._attribution else {}

    def reset(self) -> None:
        """Start counting afresh (storages still alive from before are forgotten)."""
        with self._lock:
            self._live.clear()
            self.saved_bytes = self.tensors = self.live_bytes = self.peak_bytes = 0
        if self._attribution:
            self._attribution.totals = {k: 0 for k in self._attribution.totals}

    def __enter__(self) -> SavedTensorMeter:
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, _unpack)
        self._hooks.__enter__()
        if self._attribution:
            self._attribution.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._attribution:
            self._attribution.__exit__(*exc)
        self._hooks.__exit__(*exc)
        self._hooks = None

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        base = t._base if t._base is not None else t
        if base.is_leaf and base.requires_grad:  # a parameter or a view of one (``weight.t()``)
            return t
        key, nbytes = _storage_key(t)
        with self._lock:
            entry = self._live.get(key)
            if entry is None:
                entry = self._live[key] = [nbytes, 0]
                self.saved_bytes += nbytes
                self.tensors += 1
                self.live_bytes += nbytes
                self.peak_bytes = max(self.peak_bytes, self.live_bytes)
                if self._attribution:
                    self._attribution.add(nbytes)
            entry[1] += 1
        weakref.finalize(t, self._release, key, entry)
        return t

    def _release(self, key: int, entry: list[int]) -> None:
        with self._lock:
            entry[1] -= 1
            if entry[1] == 0 and self._live.get(key) is entry:
                del self._live[key]
                self.live_bytes -= entry[0]


def _unpack(t: torch.Tensor) -> torch.Tensor:
    return t


class LiveTensorTracker:
    """Follow every tensor storage that ops create inside the block: current and peak bytes.

    A ``TorchDispatchMode`` sees each op's outputs; a storage is counted when it first appears and
    released when the last tensor using it is freed. Tensors that existed before the block
    (parameters, inputs made outside) and views of them are not counted. Works on real and on
    fake tensors, so it gives the exact tensor-level peak of a step without running it.
    """

    def __init__(self) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode

        tracker = self

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
                out = func(*args, **(kwargs or {}))
                tracker._track(args, kwargs, out)
                return out

        self._mode = _Mode()
        self._lock = threading.Lock()
        self._live: dict[int, list[int]] = {}
        self.current_bytes = 0
        self.peak_bytes = 0

    def reset_peak(self) -> None:
        self.peak_bytes = self.current_bytes

    def __enter__(self) -> LiveTensorTracker:
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._mode.__exit__(*exc)

    def _track(self, args: Any, kwargs: Any, out: Any) -> None:
        from torch.utils._pytree import tree_leaves

        outputs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        if not outputs:
            return
        inputs = {_storage_key(t)[0] for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        for t in outputs:
            key, nbytes = _storage_key(t)
            with self._lock:
                entry = self._live.get(key)
                if entry is None:
                    if key in inputs:  # a view of, or in-place op on, a tensor from outside
                        continue
                    entry = self._live[key] = [nbytes, 0]
                    self.current_bytes += nbytes
                    self.peak_bytes = max(self.peak_bytes, self.current_bytes)
                entry[1] += 1
            weakref.finalize(t, self._release, key, entry)

    def _release(self, key: int, entry: list[int]) -> None:
        with self._lock:
            entry[1] -= 1
            if entry[1] == 0 and self._live.get(key) is entry:
                del self._live[key]
                self.current_bytes -= entry[0]


