"""Connection limits for ``fuel serve`` against slow or idle clients (slowloris).

uvicorn's h11 protocol times out a connection only while it idles *between* requests: one that
never finishes its request headers, or drips its body a byte at a time, is held forever, and
enough of them starve the server of connections (and, under ``limit_concurrency``, make it
answer every well-behaved client 503). ``guarded_protocol`` adds the missing deadlines:

- a request's headers must be complete within ``header_timeout`` seconds of the connection
  opening (or of the previous response on a kept-alive connection);
- its body within ``body_timeout`` seconds of its headers;
- at most ``max_connections`` connections are open at once: one more is closed at once, before
  it costs a request task.

A connection past a deadline is closed; the application sees the client disconnect. Memory per
connection is bounded by h11's header limit (16 KiB) and the app's body limit."""

from __future__ import annotations

from dataclasses import dataclass

HEADER_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 30.0
MAX_CONNECTIONS = 1024


@dataclass(frozen=True)
class ConnectionLimits:
    """The deadlines and the connection cap ``fuel serve`` runs with."""

    header_timeout: float = HEADER_TIMEOUT_S
    body_timeout: float = BODY_TIMEOUT_S
    max_connections: int = MAX_CONNECTIONS


def guarded_protocol(limits: ConnectionLimits) -> type:
    """uvicorn's H11Protocol with ``limits`` enforced (pass it as ``uvicorn.Config(http=...)``)."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedH11Protocol(H11Protocol):
        _deadline = None
        _waiting_for = None  # "headers", "body" or None

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            if len(self.connections) > limits.max_connections:
                transport.close()  # over the cap: refused before it costs anything more
                return
            self._arm("headers", limits.header_timeout)

        def _arm(self, what: str, seconds: float) -> None:
            self._disarm()
            self._waiting_for = what
            self._deadline = self.loop.call_later(seconds, self._expire)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
            self._deadline = self._waiting_for = None

        def _expire(self) -> None:
            self._deadline = None
            if not self.transport.is_closing():
                self.transport.close()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            state = self.conn.their_state
            if self._waiting_for == "headers" and state is not h11.IDLE:
                if state is h11.SEND_BODY:
                    self._arm("body", limits.body_timeout)
                else:
                    self._disarm()
            elif self._waiting_for == "body" and state is not h11.SEND_BODY:
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
                self._arm("headers", limits.header_timeout)  # the next request on this connection

        def connection_lost(self, exc) -> None:
            self._disarm()
            super().connection_lost(exc)

    return GuardedH11Protocol
