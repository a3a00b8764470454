"""CSI request builders, filled as a CO fills them, for every caller that talks to the driver."""
