"""The faults the cache tests inject, kept here and never in serbench's code (docs/cache.md).

``REENCODE_ON_HIT`` is vLLM #52040's shape on the first hop: on a cache hit
the frontend still serializes the tensor (a copy of its bytes, held until the
message is built) although only the reference is sent. It is source text:
``tests/gate/test_cache_gate.py`` appends it to ``serbench/links/cache.py`` in the head
commit of a clone, a regression as a commit would bring one, and the gate must
flag that commit; ``inject`` applies it to a running process.
"""

from __future__ import annotations

from types import ModuleType

REENCODE_ON_HIT = """

# ---- a fault injected by tests/gate/test_cache_gate.py (tests/backends/cache_faults.py) ----
_sent_hit = FrontendCache.hit


def _reencode_on_hit(self, key, leaf, ref):
    kept = self.__dict__.setdefault("reencoded", [])
    kept.append(bytes(array_bytes(leaf)))  # serialized again, though only the reference goes
    return _sent_hit(self, key, leaf, ref)


FrontendCache.hit = _reencode_on_hit
"""


def inject(module: ModuleType) -> None:
    """Apply the fault to ``serbench.links.cache`` as imported (for the tests that run in-process)."""
    exec(REENCODE_ON_HIT, module.__dict__)
