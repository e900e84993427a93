"""Tests of web/."""
