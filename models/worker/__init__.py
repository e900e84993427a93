"""The provider workers: litellm in child processes. pool (how many, which takes a call),
process (one worker from spawn to end), remote (its calls in flight), protocol (every message
and its framing), child (the worker itself), interface (what the transport asks of them),
settings, proc (processes by pid), ipc (data and failures of the crossing), wire (the HTTP
record and hooks), clients and sockets (the HTTP clients handed to litellm)."""
