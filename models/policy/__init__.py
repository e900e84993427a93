"""How the transport treats a gateway: attempt policy, circuit breakers, key rotation, pacing,
token bucket and learned rate limits."""
