"""Tests of media/."""
