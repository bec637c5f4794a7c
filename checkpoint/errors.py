"""Errors raised while locating or loading a checkpoint."""


class CheckpointError(ValueError):
    """A checkpoint is missing a file, a tensor, or has a wrong shape/config; the message says which."""
