"""Handlers for media: voice, photos, documents, their downloads and limits."""
