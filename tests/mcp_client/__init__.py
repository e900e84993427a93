"""Tests of mcp_client/."""
