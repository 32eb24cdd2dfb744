"""User-facing exceptions.

Every problem a user can fix (bad input file, bad config, bad model file) raises a subclass of
:class:`SegpipeError`. The CLI prints its message on one line and exits with code 2; anything
else is a bug and exits with code 1.
"""

from __future__ import annotations

__all__ = ["SegpipeError", "InputError", "GeometryError", "ConfigError", "ModelError", "OutputError",
           "OutputFormatError", "DependencyError"]


class SegpipeError(Exception):
    """Base class for problems the user can fix; the message is one line."""


class InputError(SegpipeError):
    """An input image or dataset cannot be used (missing, unreadable, wrong dimension, NaN...)."""


class GeometryError(SegpipeError):
    """Spacing, origin, direction or shape is invalid or inconsistent."""


class ConfigError(SegpipeError):
    """A configuration file or value is invalid (unknown key, wrong type, out of range)."""


class ModelError(SegpipeError):
    """A model file is missing, corrupt or incompatible."""


class OutputError(SegpipeError):
    """An output path cannot be written (missing folder, not writable)."""


class OutputFormatError(OutputError):
    """An output format the input cannot give or that does not exist (DICOM SEG or RTSTRUCT
    from an input that is not a DICOM series)."""


class DependencyError(SegpipeError):
    """An optional package a feature needs is not installed; the message names the pip command."""
