"""Observers: console progress (``console``), JSONL metrics and completions (``files``), W&B and
TensorBoard (``trackers``). All receive the same typed events through the hub in ``base``."""

from rlvr.observers.base import Observer, ObserverHub
from rlvr.observers.console import ConsoleObserver
from rlvr.observers.files import JsonlObserver
from rlvr.observers.trackers import TensorBoardObserver, WandbObserver

__all__ = [
    "ConsoleObserver",
    "JsonlObserver",
    "Observer",
    "ObserverHub",
    "TensorBoardObserver",
    "WandbObserver",
]
