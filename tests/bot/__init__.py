"""Tests of bot/."""
