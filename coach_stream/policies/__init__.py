"""Torch networks and the actors that turn them into actions on a batch of observations."""
