"""Typed values that travel between Caldera's parts (JobSpec, Job, JobState, Node...)."""
