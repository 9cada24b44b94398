"""Process plumbing every stage shares: safe writes, credential masking, logs, device and precision,
multi-process launches, the run-directory lock, disk use and the faults that end a run."""
