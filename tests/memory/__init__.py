"""Tests of memory/."""
