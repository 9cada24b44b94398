"""Process plumbing every layer shares: safe writes (``io``), credential masking (``secrets``), logs,
device and precision (``hardware``), multi-process launches (``distributed``), the run-directory lock
(``run_lock``), disk use, the faults that end a run, the run's own top-level keys (``run_settings``),
Hydra's composition through its public API (``hydra_compose``), bounded JSON and YAML reading
(``safe_json``, ``safe_yaml``), GPU cards to plan memory for (``cards``), chart saving (``charts``), CPU
malloc settings (``allocator``) and SLURM requeueing (``slurm_requeue``). The memory check itself is
rlvr.model.memory."""
