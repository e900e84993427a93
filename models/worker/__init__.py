"""The provider worker: the pool of worker processes (pool), the child that runs litellm
(child), their socket protocol (ipc, wire, sockets) and the HTTP clients handed to litellm."""
