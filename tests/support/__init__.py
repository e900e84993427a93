"""What the tests share besides their fixtures: the end-to-end harness (e2e_bot), the
consolidation and MCP stacks, clocks, waits, real-data readers and paths. Fixtures live in
tests/conftest.py; the fakes of the outside services in tests/fakes/."""
