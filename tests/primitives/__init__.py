"""Tests of primitives/."""
