"""End-to-end tests: the real bot, python-telegram-bot and litellm against the fakes
(tests/fakes/) on 127.0.0.1, and the tests of those fakes."""
