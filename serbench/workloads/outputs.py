"""``outputs-B``: one engine step's output for B running requests, with or without logprobs.

What the field reports as the cost of the output path (vLLM #57442, SGLang #32223):
per-request logprob lists built, sent over IPC and turned back into objects at every step. Options:

* ``logprobs=K`` — besides its sampled token, every request carries the
  sampled token's logprob plus the top-K alternatives (ids, logprobs) and the
  sampled token's rank; 0 (the default) = no logprobs;
* ``layout=nested`` (default) — an ``EngineCoreOutputs`` of per-request
  ``EngineCoreOutput``s with per-request Python lists, as engines build them
  today; ``layout=flat`` — a ``FlatEngineCoreOutputs``: the request ids and a
  few contiguous arrays for the whole step plus per-request offsets, which
  the msgpack backends carry zero-copy.

The sampled tokens are ``output_token(request_id, position)`` as in every workload; the
alternatives and logprobs are a function of the sampled token and the rank, so a frontend
checks a whole step with a few array operations (``check``). ``message(index)`` is the step at
position ``index`` of the workload's own B requests (one in 32 finishing), what micro times;
``request(i)`` is a short prompt asking for ``max_tokens`` steps with K logprobs, what the ipc
frontend sends before the engine streams the steps.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from serbench.runtime import lazy
from serbench.workloads.base import VOCAB_SIZE, Running, Workload, output_token
from serbench.workloads.messages import (
    EngineCoreOutput,
    EngineCoreOutputs,
    EngineCoreRequest,
    FlatEngineCoreOutputs,
    FlatLogprobs,
    Logprobs,
    SamplingParams,
)

torch = lazy.torch(__name__)  # imported on first use: `serbench list` describes workloads without it

LAYOUTS = ("nested", "flat")
PROMPT_TOKENS = 16
STEPS = 40  # tokens per request in the ipc output path: the steps the engine streams
FINISH_EVERY = 32  # in ``message(index)``, one request in this many ends at that step
_ALT_STRIDE = 7919  # alternative j of a sampled token t is (t + j * stride) % vocab


def logprob_rows(tokens: np.ndarray, top: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ids, logprobs, ranks) for sampled ``tokens``: a pure function of each token.

    Column 0 is the sampled token itself; columns 1..top its alternatives.
    """
    cols = np.arange(top + 1, dtype=np.int64)
    ids = ((tokens[:, None].astype(np.int64) + cols * _ALT_STRIDE) % VOCAB_SIZE).astype(np.int32)
    logprobs = (-(cols + 1) * 0.25 - (tokens[:, None] % 97) / 1024.0).astype(np.float32)
    ranks = (tokens % 7 + 1).astype(np.int32)
    return ids, logprobs, ranks


class Outputs(Workload):
    """One step's outputs for ``batch`` running requests, ``logprobs`` alternatives each, in ``layout``."""

    kind = "outputs"

    def __init__(
        self,
        batch: int,
        logprobs: int | str = 0,
        layout: str = "nested",
        seed: int | str = 0,
        steps: int | str = STEPS,
    ) -> None:
        if layout not in LAYOUTS:
            raise ValueError(f"unknown layout {layout!r}; layouts: {', '.join(LAYOUTS)}")
        self.batch = int(batch)
        self.top = int(logprobs)
        self.layout = layout
        self.seed = int(seed)
        self.output_len = int(steps)
        if not 1 <= self.batch <= 1 << 20 or not 0 <= self.top <= 100 or not 1 <= self.output_len <= 100_000:
            raise ValueError("batch must be in [1, 2^20], logprobs in [0, 100], steps in [1, 100000]")
        self.name = f"outputs-{self.batch}"
        with_logprobs = f", top-{self.top} logprobs" if self.top else ""
        self.description = f"one engine step for {self.batch} running requests{with_logprobs}, {layout}"
        self.message_type = FlatEngineCoreOutputs if layout == "flat" else EngineCoreOutputs

    def payload_bytes(self) -> int:
        return 0

    def request_id(self, index: int) -> str:
        """The same ids whatever the layout and logprobs, so two layouts carry the same step."""
        return f"req-{self.seed}-{index}"

    def request(self, index: int) -> EngineCoreRequest:
        return EngineCoreRequest(
            request_id=self.request_id(index),
            prompt_token_ids=[1 + (index + i) % 1000 for i in range(PROMPT_TOKENS)],
            sampling_params=SamplingParams(
                temperature=0.0, max_tokens=self.output_len, ignore_eos=True, logprobs=self.top or None
            ),
            arrival_time=0.0,
            eos_token_id=2,
        )

    def message(self, index: int = 0) -> EngineCoreOutputs | FlatEngineCoreOutputs:
        """The step at position ``index`` of this workload's ``batch`` requests."""
        return self.step(
            [
                Running(self.request_id(i), index, (i + index) % FINISH_EVERY == FINISH_EVERY - 1)
                for i in range(self.batch)
            ]
        )

    def step(self, running: Sequence[Running]) -> EngineCoreOutputs | FlatEngineCoreOutputs:
        """One step's message: one new token (and its logprob rows) per running request."""
        tokens = np.fromiter(
            (output_token(r.request_id, r.position) for r in running), np.int32, len(running)
        )
        rows = logprob_rows(tokens, self.top) if self.top else None
        if self.layout == "flat":
            return self._flat(running, tokens, rows)
        return self._nested(running, tokens, rows)

    @staticmethod
    def _nested(running: Sequence[Running], tokens: np.ndarray, rows) -> EngineCoreOutputs:
        outputs = []
        ids, logprobs, ranks = (a.tolist() for a in rows) if rows else (None, None, None)
        for i, (r, token) in enumerate(zip(running, tokens.tolist(), strict=True)):
            new = Logprobs([ids[i]], [logprobs[i]], [ranks[i]]) if rows else None
            outputs.append(EngineCoreOutput(r.request_id, [token], "length" if r.last else None, new))
        return EngineCoreOutputs(outputs=outputs)

    @staticmethod
    def _flat(running: Sequence[Running], tokens: np.ndarray, rows) -> FlatEngineCoreOutputs:
        logprobs = FlatLogprobs(*(torch.from_numpy(a) for a in rows)) if rows else None
        return FlatEngineCoreOutputs(
            request_ids=[r.request_id for r in running],
            new_token_ids=torch.from_numpy(tokens),
            token_offsets=torch.arange(len(running) + 1, dtype=torch.int32),
            finished={i: "length" for i, r in enumerate(running) if r.last},
            logprobs=logprobs,
        )

    def check(self, message: EngineCoreOutputs | FlatEngineCoreOutputs) -> None:
        """ValueError unless every logprob row is the one its sampled token implies (and K is right)."""
        if isinstance(message, FlatEngineCoreOutputs):
            tokens = np.asarray(message.new_token_ids)
            lp = message.logprobs
            got = lp and (np.asarray(lp.token_ids), np.asarray(lp.logprobs), np.asarray(lp.ranks))
        else:
            tokens = np.asarray([t for out in message.outputs for t in out.new_token_ids], np.int32)
            present = [out.new_logprobs for out in message.outputs if out.new_logprobs is not None]
            if present and len(present) != len(message.outputs):
                raise ValueError("logprobs for some requests of a step but not others")
            got = present and (
                np.asarray([row for lp in present for row in lp.token_ids], np.int32),
                np.asarray([row for lp in present for row in lp.logprobs], np.float32),
                np.asarray([rank for lp in present for rank in lp.ranks], np.int32),
            )
        if not self.top:
            if got:
                raise ValueError("logprobs in a step of a workload that asked for none")
            return
        if not got:
            raise ValueError(f"no logprobs in a step of a workload that asked for top-{self.top}")
        for name, want, have in zip(
            ("ids", "logprobs", "ranks"), logprob_rows(tokens, self.top), got, strict=True
        ):
            if want.shape != have.shape or not np.array_equal(want, have):
                raise ValueError(f"logprob {name} differ from what the sampled tokens imply")
