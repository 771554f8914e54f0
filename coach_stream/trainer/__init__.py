"""The trainer: experience in, gradient steps, policy versions and resumable state out."""
