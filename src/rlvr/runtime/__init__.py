"""Process plumbing every stage shares: safe writes, credential masking, logs, device and precision,
multi-process launches, the run-directory lock, disk use, the faults that end a run, the memory
pre-flight (will a training step fit the device) and bounded YAML reading."""
