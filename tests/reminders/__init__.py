"""Tests of reminders/."""
