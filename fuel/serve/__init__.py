"""``fuel serve``: an OpenAI-compatible HTTP server for fuel's models (docs/serving.md).

``engine`` runs every model call on one worker thread: a bounded request queue and one
forward per step for all live requests (decode tokens and prompt chunks within a token
budget, ``fuel.models.paged_step``); ``blocks`` is its KV block manager (admission, preemption,
prefix reuse); ``constraints`` turns ``response_format`` schemas into token masks
(llguidance); ``protocol`` checks requests and shapes OpenAI responses and errors; ``app`` is
the ASGI application (starlette, served by uvicorn); ``metrics`` the Prometheus counters. The
serving dependencies are the ``serve`` extra; nothing here is imported by ``import fuel``.
"""
