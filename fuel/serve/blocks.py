"""The KV block manager, kept apart from the model (vLLM's design): fixed-size blocks from one
pool, handed to requests one at a time as their positions grow, with reference counts so full
blocks of a shared prefix serve many requests at once.

Prefix reuse: a full block is named by a hash of every token up to its end (a chain: the
previous block's hash and this block's tokens), so a second request whose prompt starts with
the same tokens takes those blocks as they are and computes only the rest. Shared blocks are
never written (a request writes only positions past what it took), so sharing needs no copy.
A block no request holds keeps its contents (and its name) until it is needed again: it is
reused only when no free block is left, least recently used first.

Block 0 is reserved: padding rows of a step write there."""

from __future__ import annotations

import hashlib
import heapq
from collections import OrderedDict
from collections.abc import Sequence

from fuel.ir.errors import FuelError, InvalidArgument


class OutOfBlocks(FuelError):
    """No KV block is free (nor reusable): the scheduler preempts a request or waits."""


def block_hashes(tokens: Sequence[int], block_size: int, count: int,
                 previous: bytes = b"") -> list[bytes]:
    """The chained hashes of the first ``count`` full blocks of ``tokens`` (after the block
    whose hash is ``previous``, when ``tokens`` starts mid-sequence on a block boundary)."""
    hashes = []
    for index in range(count):
        part = tokens[index * block_size:(index + 1) * block_size]
        digest = hashlib.blake2b(previous, digest_size=16)
        digest.update(b"".join(int(t).to_bytes(4, "little", signed=True) for t in part))
        previous = digest.digest()
        hashes.append(previous)
    return hashes


class BlockManager:
    """``blocks`` blocks of ``block_size`` positions (block 0 reserved for padding)."""

    def __init__(self, blocks: int, block_size: int) -> None:
        if blocks < 2 or block_size < 1:
            raise InvalidArgument(f"the block manager needs at least 2 blocks of at least one "
                                  f"position, got {blocks} of {block_size}")
        self.blocks = blocks
        self.block_size = block_size
        # a heap: the lowest free block first, so the blocks in use stay packed at the
        # pool's start and the free ones make long runs whose whole pages go back to the
        # system (a block of a few positions is smaller than a page)
        self._free = list(range(1, blocks))
        self._references = [0] * blocks
        self._by_hash: dict[bytes, int] = {}
        self._hash_of: dict[int, bytes] = {}
        self._idle: OrderedDict[int, None] = OrderedDict()  # named, unreferenced, LRU first
        self._written: set[int] = set()  # handed out since their memory was last released
        self.prefix_hit_tokens = 0
        self.prefix_queries = 0
        self.prefix_hits = 0

    # ------------------------------------------------------------------ state
    @property
    def usable(self) -> int:
        """Blocks a request could be given now (free, or named but unreferenced)."""
        return len(self._free) + len(self._idle)

    @property
    def used(self) -> int:
        """Blocks some request holds."""
        return self.blocks - 1 - self.usable

    @property
    def cached(self) -> int:
        """Named blocks no request holds (kept for prefix reuse)."""
        return len(self._idle)

    def blocks_for(self, positions: int) -> int:
        return -(-positions // self.block_size)

    # ------------------------------------------------------------------ allocation
    def allocate(self) -> int:
        """A block for one request (its reference count 1); OutOfBlocks when none is left."""
        if self._free:
            block = heapq.heappop(self._free)
        elif self._idle:
            block, _ = self._idle.popitem(last=False)
            del self._by_hash[self._hash_of.pop(block)]
        else:
            raise OutOfBlocks(f"all {self.blocks - 1} KV blocks are in use")
        self._references[block] = 1
        self._written.add(block)
        return block

    def release(self, blocks: Sequence[int]) -> None:
        """A request lets go of ``blocks``: those no request holds any more are free again
        (named ones stay reusable by their prefix until their block is needed)."""
        for block in reversed(blocks):
            self._references[block] -= 1
            if self._references[block] == 0:
                if block in self._hash_of:
                    self._idle[block] = None
                else:
                    heapq.heappush(self._free, block)

    def released(self, keep_cached: int) -> list[int]:
        """Forget all but the ``keep_cached`` most recently used cached blocks, and return
        the free blocks whose memory may be given back: none when no block was written since
        the last call, else every free block (a page shared with a block in use then may be
        wholly free now; the pool releases whole pages of runs of them)."""
        while len(self._idle) > keep_cached:
            block, _ = self._idle.popitem(last=False)
            del self._by_hash[self._hash_of.pop(block)]
            heapq.heappush(self._free, block)
        if not self._written:
            return []
        self._written.clear()
        return list(self._free)

    # ------------------------------------------------------------------ prefixes
    def match(self, tokens: Sequence[int]) -> list[int]:
        """The longest run of named blocks holding a prefix of ``tokens``, leaving at least
        the last token to compute (its logits are needed); each is now held once more."""
        usable = (len(tokens) - 1) // self.block_size
        self.prefix_queries += 1
        found = []
        for digest in block_hashes(tokens, self.block_size, usable):
            block = self._by_hash.get(digest)
            if block is None:
                break
            found.append(block)
        for block in found:
            if self._references[block] == 0:
                del self._idle[block]
            self._references[block] += 1
        if found:
            self.prefix_hits += 1
            self.prefix_hit_tokens += len(found) * self.block_size
        return found

    def cached_prefix(self, hashes: Sequence[bytes]) -> int:
        """How many of the leading block ``hashes`` (block_hashes of a prompt) name cached
        blocks now (taking none of them)."""
        count = 0
        for digest in hashes:
            if digest not in self._by_hash:
                break
            count += 1
        return count

    def name(self, blocks: Sequence[int], tokens: Sequence[int], named: int) -> int:
        """Name the full blocks of a request past the first ``named`` (its ``blocks`` holding
        ``tokens``' positions); returns how many of its blocks are named now. A block whose
        prefix another block already names stays unnamed."""
        full = min(len(tokens) // self.block_size, len(blocks))
        if full <= named:
            return named
        previous = self._hash_of.get(blocks[named - 1], b"") if named else b""
        if named and not previous:  # the previous block lost its name: recompute the chain
            previous = block_hashes(tokens, self.block_size, named)[-1]
        start = named * self.block_size
        digests = block_hashes(tokens[start:], self.block_size, full - named, previous)
        for block, digest in zip(blocks[named:full], digests):
            if digest not in self._by_hash and block not in self._hash_of:
                self._by_hash[digest] = block
                self._hash_of[block] = digest
        return full
