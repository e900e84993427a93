"""Recall: the archive of consolidated messages, its search terms, and the search over both."""
