"""Consolidation: a session's transcript, the save_memory call, and the durable job queue."""
