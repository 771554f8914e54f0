"""Rollout: vector-env steps in, ExperienceChunks out (worker) or returns out (evaluator)."""
