"""Evaluation: generate answers for held-out questions (``generation``, ``sampling``), score them with
the task verifiers (``evaluator``), summarise them (``metrics``, ``results``), and the run's schedule of
evaluations under their labels (``schedule``)."""
