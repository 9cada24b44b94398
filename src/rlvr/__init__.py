"""RLVR pipeline: GRPO on verifiable reasoning tasks, driven by Hydra configs."""

from rlvr import prompt_families as _prompt_families
from rlvr.runtime import secrets as _secrets

# Once, at import: run_pipeline.py imports rlvr before Hydra composes a config that uses them.
_prompt_families.register()
# Every value oc.env returns is recorded and masked in every output (rlvr.runtime.secrets).
_secrets.watch_env_reads()
