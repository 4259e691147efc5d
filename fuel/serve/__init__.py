"""``fuel serve``: an OpenAI-compatible HTTP server for fuel's models.

``engine`` runs every model call on one worker thread (a bounded request queue, a fixed number
of generation slots whose decode steps take turns), ``protocol`` checks requests and shapes
OpenAI responses and errors, ``app`` is the ASGI application (starlette, served by uvicorn),
``metrics`` the Prometheus counters. The serving dependencies are the ``serve`` extra; nothing
here is imported by ``import fuel``.
"""
