"""RLVR pipeline: GRPO on verifiable reasoning tasks, driven by Hydra configs."""

from rlvr.config import resolvers as _resolvers
from rlvr.runtime import secrets as _secrets

# Once, at import: run_pipeline.py imports rlvr before Hydra composes a config that uses them.
_resolvers.register()
# Every value oc.env returns is recorded and masked in every output (rlvr.runtime.secrets).
_secrets.watch_env_reads()
