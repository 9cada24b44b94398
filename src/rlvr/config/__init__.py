"""The one config gate: the check before Hydra (hydra_check), the check after composition (gate;
validation: every ``_target_`` node bound to its class's constructor, the schema), config errors.
What a config may make the program do is the trust boundary's (rlvr.security)."""
