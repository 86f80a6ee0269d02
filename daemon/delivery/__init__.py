"""Delivery: the consumer, the committer, the checkpoint store and the resume rule."""
