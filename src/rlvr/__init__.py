"""RLVR pipeline: GRPO on verifiable reasoning tasks, driven by Hydra configs."""

from rlvr import resolvers as _resolvers

# Once, at import: run_pipeline.py imports rlvr before Hydra composes a config that uses them.
_resolvers.register()
