"""Evaluation: generate answers for held-out questions, score them with the task verifiers, and summarise."""
