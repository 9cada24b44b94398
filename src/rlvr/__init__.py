"""RLVR pipeline: GRPO on verifiable reasoning tasks, driven by Hydra configs."""

from rlvr import prompt_families as _prompt_families
from rlvr.runtime import hardware as _hardware
from rlvr.runtime import secrets as _secrets

# Once, at import: run_pipeline.py imports rlvr before Hydra composes a config that uses them.
_prompt_families.register()
# ${rlvr.fp32_cpu:A,B}: A where the run trains in fp32 on a CPU (rlvr.runtime.hardware).
_hardware.register_resolvers()
# Every value oc.env returns is recorded and masked in every output (rlvr.runtime.secrets).
_secrets.watch_env_reads()
