"""Observers: console progress, JSONL metrics, W&B, TensorBoard. All receive the same typed events."""

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
