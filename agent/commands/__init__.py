"""The `ragpulse` subcommands other than `run` and `validate-config`, one module each: they read the
settings (as the composition root does) and call into the rest of ragpulse."""
