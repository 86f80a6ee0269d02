"""The library layer: what the daemon, the pipeline and the CLI share."""
