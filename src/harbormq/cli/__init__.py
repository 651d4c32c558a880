"""The ``harbormq`` command: one module per command group."""

from .main import main

__all__ = ["main"]
