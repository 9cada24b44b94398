"""The trust boundary (SECURITY.md): what a config, a file from elsewhere or a model may make this
program do. ``trust``: which code a config may name, which resolvers and credentials it may use,
which settings would run a model's own code; ``hydra_policy``: which of Hydra's own settings a
config may set, where a run may write. The config gate (rlvr.config) calls both."""
