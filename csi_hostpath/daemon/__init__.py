"""The daemon: the driver process built from a Config, its endpoint and its stop signals."""
