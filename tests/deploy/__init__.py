"""Tests of the deployment files in deploy/: the image, compose, systemd units, README."""
