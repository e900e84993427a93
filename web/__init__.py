"""Looking things up: web search (SearXNG) and page reading, below agent/ and free of Telegram.

Everything here treats the network as hostile: every connection goes to an address checked at
connect time (web/addresses.py, web/fetch.py), every read is bounded in time and bytes, and the
text that comes back is untrusted data for the agent to frame, never an instruction.
"""
