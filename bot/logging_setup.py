"""Moved to models/logging_setup.py (the provider worker, in models/, logs through it too).
Kept so code written against the old place still imports; new code imports from models."""

from models.logging_setup import *  # noqa: F403
from models.logging_setup import configure_logging, log_crash, redactor  # noqa: F401
