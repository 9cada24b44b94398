"""The one config gate: ``hydra_check`` screens the command line before Hydra acts on it
(:func:`~rlvr.config.hydra_check.screen_command_line`); ``gate`` checks the composed config and builds
the components; ``validation`` binds every ``_target_`` node to its class's constructor and the run's
own keys to their schema; ``copies`` reports a value that other keys copy once, where it was set.
What a config may make the program do is the trust boundary's (rlvr.security)."""
