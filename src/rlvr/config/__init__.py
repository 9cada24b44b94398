"""The one config gate: what a config may name (trust), the check before Hydra (hydra_check),
the check after composition (gate, validation), config errors, resolvers, bounded YAML and the
memory check."""
