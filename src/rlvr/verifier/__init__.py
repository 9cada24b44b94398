"""Sandboxed scoring of model answers with reasoning-gym's verifiers and, for free-form data, the
answer checkers (``checkers``): ``screen`` refuses answers that could run code, ``worker`` calls one
verifier in a killable process, ``sandbox`` runs them, ``entries`` is the JSON form of an entry."""

from rlvr.verifier.sandbox import Score, ScoreRequest, VerifierPool, verifier_task
from rlvr.verifier.screen import screen_answer

__all__ = ["Score", "ScoreRequest", "VerifierPool", "screen_answer", "verifier_task"]
