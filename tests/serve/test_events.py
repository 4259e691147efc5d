"""How the engine thread's events reach the request handlers: fuel.serve.app's Mailbox (one
event-loop wake-up for the events posted while a delivery is pending) and take_events."""

import asyncio
import threading

import pytest

pytest.importorskip("starlette")

from fuel.serve.app import DISCONNECTED, Mailbox, take_events, watch_disconnect  # noqa: E402


class CountingLoop:
    """An event loop's call_soon_threadsafe, counted."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop, self.calls = loop, 0

    def call_soon_threadsafe(self, callback, *args):
        self.calls += 1
        return self.loop.call_soon_threadsafe(callback, *args)


def test_mailbox_delivers_every_event_in_order_with_one_wake_up_per_batch():
    async def main():
        loop = CountingLoop(asyncio.get_running_loop())
        mailbox = Mailbox(asyncio.get_running_loop())
        mailbox.loop = loop
        queues = [asyncio.Queue() for _ in range(3)]

        def engine() -> None:  # a step's tokens for three requests, 100 steps
            for i in range(300):
                mailbox.post(queues[i % 3], i)

        poster = threading.Thread(target=engine)
        poster.start()
        poster.join()  # the loop is blocked meanwhile: every post joins the pending delivery
        got = [[await asyncio.wait_for(q.get(), 5) for _ in range(100)] for q in queues]
        assert got == [list(range(k, 300, 3)) for k in range(3)]
        assert loop.calls == 1
        mailbox.post(queues[0], "next")  # after a delivery, a new post wakes the loop again
        assert await asyncio.wait_for(queues[0].get(), 5) == "next"
        assert loop.calls == 2 and all(q.empty() for q in queues)

    asyncio.run(main())


def test_mailbox_on_a_closed_loop_drops_events_quietly():
    loop = asyncio.new_event_loop()
    mailbox = Mailbox(loop)
    loop.close()
    mailbox.post(asyncio.Queue(), "lost")  # nobody listens; no error reaches the engine


def test_take_events_waits_for_one_then_takes_all_waiting_and_the_disconnect_marker():
    async def main():
        events: asyncio.Queue = asyncio.Queue()
        messages: asyncio.Queue = asyncio.Queue()
        watcher = watch_disconnect(messages.get, events)
        asyncio.get_running_loop().call_later(0.01, events.put_nowait, "a")
        assert await take_events(events) == ["a"]
        for item in ("b", "c"):
            events.put_nowait(item)
        assert await take_events(events) == ["b", "c"]
        await messages.put({"type": "http.request"})
        await messages.put({"type": "http.disconnect"})
        assert await asyncio.wait_for(take_events(events), 5) == [DISCONNECTED]
        await watcher

    asyncio.run(main())
