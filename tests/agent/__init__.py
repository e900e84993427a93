"""Tests of agent/."""
