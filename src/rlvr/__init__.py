"""RLVR pipeline: GRPO on verifiable reasoning tasks, driven by Hydra configs."""
