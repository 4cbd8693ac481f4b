"""``text-sonnet``: synthetic sonnet-style prompts, as vLLM's serving benchmark uses.

Poems are generated, not copied: fourteen lines of pseudo-words with an
ABAB CDCD EFEF GG rhyme scheme, tokenised one token per word or mark. Every
prompt starts with the same 200-token prefix (instructions plus a fixed
poem), so prefix caching sees what it sees in the real benchmark.
"""

from __future__ import annotations

import random
import zlib
from functools import cached_property

from serbench.workloads.base import Workload
from serbench.workloads.messages import EngineCoreRequest, SamplingParams

_ONSETS = [
    "b",
    "br",
    "c",
    "ch",
    "d",
    "f",
    "fl",
    "g",
    "gr",
    "h",
    "l",
    "m",
    "n",
    "p",
    "pr",
    "r",
    "s",
    "sh",
    "st",
    "t",
    "th",
    "tr",
    "w",
    "wh",
]
_NUCLEI = ["a", "ai", "e", "ea", "i", "o", "oo", "ou", "u"]
_CODAS = ["", "d", "ght", "l", "ll", "n", "nd", "ne", "r", "re", "st", "th"]
_MARKS = [",", ".", ";", "!"]
_LINES = 14
_RHYMES = "ABABCDCDEFEFGG"
PROMPT_TOKENS = 550
PREFIX_TOKENS = 200
OUTPUT_TOKENS = 150


def _word(rng: random.Random, rhyme: str | None = None) -> str:
    syllables = [rng.choice(_ONSETS) + rng.choice(_NUCLEI) for _ in range(rng.randint(1, 2))]
    return "".join(syllables) + (rhyme if rhyme is not None else rng.choice(_CODAS))


def sonnet(rng: random.Random) -> list[str]:
    """Fourteen lines of about ten words whose last words rhyme as a sonnet's do."""
    # the rhymes in their first order, not a set's: a set's order follows PYTHONHASHSEED
    endings = {letter: rng.choice(_NUCLEI) + rng.choice(_CODAS[1:]) for letter in dict.fromkeys(_RHYMES)}
    lines = []
    for letter in _RHYMES:
        words = [_word(rng) for _ in range(rng.randint(7, 9))]
        words.append(_word(rng, endings[letter]))
        lines.append(" ".join(words) + rng.choice(_MARKS))
    return lines


def words(text: str) -> list[str]:
    """The text's words and punctuation marks, one token each."""
    return text.replace(",", " ,").replace(".", " .").replace(";", " ;").replace("!", " !").split()


def tokenize(text: str, vocab: dict[str, int]) -> list[int]:
    """One id per word or punctuation mark; ids are stable for a given text."""
    return [vocab.setdefault(word, 1000 + zlib.crc32(word.encode()) % 30000) for word in words(text)]


class TextSonnet(Workload):
    """550-token sonnet prompts (200 shared), 150 output tokens each."""

    tensors = False
    description = "sonnet-style text, 550 prompt tokens (200 shared prefix), 150 output tokens"
    output_len = OUTPUT_TOKENS

    def __init__(
        self,
        seed: int | str = 0,
        prompt_len: int | str = PROMPT_TOKENS,
        output_len: int | str = OUTPUT_TOKENS,
    ) -> None:
        self.seed = int(seed)
        self.prompt_len = int(prompt_len)
        self.output_len = int(output_len)
        if not PREFIX_TOKENS < self.prompt_len <= 100_000 or not 0 < self.output_len <= 100_000:
            raise ValueError(f"prompt_len must be in ({PREFIX_TOKENS}, 100000], output_len in (0, 100000]")
        self.name = "text-sonnet"
        self._vocab: dict[str, int] = {}

    @cached_property
    def _prefix(self) -> list[str]:
        rng = random.Random(self.seed)
        intro = "Pick as many lines as you can from these poem lines and continue them in kind:"
        return words(intro + " " + " ".join(sonnet(rng) * 3))[:PREFIX_TOKENS]

    def prompt_words(self, index: int) -> list[str]:
        """Request ``index``'s prompt as its words and marks, one per token (a frontend's text)."""
        rng = random.Random(f"{self.seed}:{index}")
        prompt = list(self._prefix)
        while len(prompt) < self.prompt_len:
            prompt += words(" ".join(sonnet(rng)))
        return prompt[: self.prompt_len]

    def request(self, index: int) -> EngineCoreRequest:
        return EngineCoreRequest(
            request_id=self.request_id(index),
            prompt_token_ids=tokenize(" ".join(self.prompt_words(index)), self._vocab),
            sampling_params=SamplingParams(temperature=0.0, max_tokens=self.output_len, ignore_eos=True),
            arrival_time=0.0,
            eos_token_id=2,
        )

    def payload_bytes(self) -> int:
        return 0
