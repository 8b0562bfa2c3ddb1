"""The aiohttp gateway: the OpenAI-compatible front door of the fleet.

Pure decisions live in ``policy/`` (admission, quotas, routing, prefix hashing, deadlines); the
rest are shells for HTTP, upstream streaming, the pod watch and Redis.
"""
