"""Sandboxed scoring of model answers with reasoning-gym's verifiers (screen + killable worker processes)."""

from rlvr.verifier.sandbox import Score, ScoreRequest, VerifierPool, verifier_task
from rlvr.verifier.screen import screen_answer

__all__ = ["Score", "ScoreRequest", "VerifierPool", "screen_answer", "verifier_task"]
