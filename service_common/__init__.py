"""Torch-free plumbing shared by the gateway, talker and vocoder processes."""
