"""The embedded offline provider: a deterministic behavioural stand-in for a language model, not a
model of people. It picks an answer option from the evidence in the rendered prompt, swayed by a
behavioural profile the model name selects; the same request always gets the same answer. What
it reads, and how: docs/kernel.md.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

from ...core.schema import LLMConfig
from . import PROVIDERS
from .base import ChatRequest, ChatResponse, Provider, estimate_tokens

# Words that make a prosocial answer more likely, and words that make a self-protective one more
# likely. Stems (first five letters) so inflections count.
PROSOCIAL = (
    "fair",
    "trust",
    "toget",
    "right",
    "harm",
    "honou",
    "mutua",
    "kind",
    "moral",
    "decen",
    "commu",
    "respo",
    "loyal",
    "promi",
    "duty",
    "good",
    "trans",
)
THREAT = (
    "risk",
    "loss",
    "lose",
    "losin",
    "explo",
    "dange",
    "betra",
    "threa",
    "suspi",
    "warn",
    "caref",
    "prote",
    "sucke",
    "unsaf",
    "cheat",
    "vulne",
)
OPTION_VALENCE = {
    "coope": 1.0,
    "share": 1.0,
    "trust": 1.0,
    "help": 1.0,
    "agree": 0.5,
    "accep": 0.5,
    "defec": -1.0,
    "refus": -1.0,
    "betra": -1.0,
    "withh": -1.0,
}
STOP = {"the", "and", "with", "your", "that", "this", "from"}
# Words that make an option an intense one ("strongly support"): loaded wording draws answers
# toward them, and without it the stand-in, like most chat models, avoids the extremes.
INTENSIFIERS = ("stron", "very", "compl", "absol", "extre", "total", "defin")
ANSWER_MARK = "answer with exactly one of:"


@dataclass(frozen=True)
class Profile:
    """How strongly each prompt feature sways one offline model."""

    evidence: float
    """Weight of option-word evidence in the prompt."""
    recency: float
    """Extra weight of text near the end of the prompt (0 = none)."""
    system_weight: float
    """Weight of system-turn text relative to user-turn text."""
    structure_penalty: float
    """Share of weight lost on JSON, table and bullet blocks."""
    valence: float
    """Sensitivity to moral and risk vocabulary."""
    position_bias: float
    """Logit bonus for the favoured option: the first of two, the middle one of a longer scale."""
    noise: float
    """Decision noise kept even at temperature 0 (a stand-in for sampling variety)."""


PRESETS = {
    "offline-base": Profile(1.0, 1.0, 1.3, 0.35, 0.8, 0.15, 0.5),
    "offline-small": Profile(0.7, 1.8, 1.0, 0.6, 1.2, 0.45, 0.8),
    "offline-large": Profile(1.4, 0.5, 1.6, 0.1, 0.5, 0.05, 0.35),
}


@lru_cache(maxsize=256)
def profile_for(model: str) -> Profile:
    """The preset for a known name, else a profile drawn deterministically from the name's hash."""
    if model in PRESETS:
        return PRESETS[model]
    digest = hashlib.sha256(model.encode("utf-8")).digest()
    u = [b / 255 for b in digest[:7]]
    return Profile(
        evidence=0.6 + 0.9 * u[0],
        recency=0.3 + 1.5 * u[1],
        system_weight=0.9 + 0.8 * u[2],
        structure_penalty=0.05 + 0.55 * u[3],
        valence=0.3 + 1.0 * u[4],
        position_bias=0.5 * u[5],
        noise=0.3 + 0.5 * u[6],
    )


def _stem(word: str) -> str:
    return word[:5]


@lru_cache(maxsize=512)
def _option_stems(
    options: tuple[str, ...],
) -> tuple[tuple[tuple[str, ...], ...], tuple[bool, ...], re.Pattern[str]]:
    stems: list[tuple[str, ...]] = []
    intense: list[bool] = []
    for option in options:
        words = [w for w in re.findall(r"[a-z]+", option.lower()) if w not in STOP and len(w) >= 3]
        core = [_stem(w) for w in words if _stem(w) not in INTENSIFIERS]
        intense.append(len(core) < len(words))
        if not core:
            core = [_stem(w) for w in re.findall(r"[a-z]+", option.lower())] or [option.lower()]
        stems.append(tuple(core))
    vocabulary = sorted(
        {s for group in stems for s in group} | set(PROSOCIAL) | set(THREAT) | set(INTENSIFIERS)
    )
    pattern = re.compile(r"\b(" + "|".join(re.escape(s) for s in vocabulary) + r")[a-z]*")
    return tuple(stems), tuple(intense), pattern


def _block_factor(block: str, penalty: float) -> float:
    if block.startswith("{") or block.startswith("[") or "\n{" in block or "\n[" in block:
        return 1.0 - penalty
    if "\n|" in block or block.startswith("|"):
        return 1.0 - penalty
    if "\n- " in block:
        return 1.0 - penalty / 2
    return 1.0


def _options_from_prompt(text: str) -> tuple[str, ...]:
    low = text.lower()
    pos = low.rfind(ANSWER_MARK)
    if pos < 0:
        return ()
    line = text[pos + len(ANSWER_MARK) :].split("\n", 1)[0].strip().rstrip(".")
    return tuple(part.strip() for part in line.split(",") if part.strip())


def choose(
    messages: Sequence[tuple[str, str]],
    options: Sequence[str],
    model: str,
    temperature: float,
    seed: int,
) -> str:
    """The option the stand-in picks for these messages (role, content)."""
    profile = profile_for(model)
    opts = tuple(options)
    stems, intense, pattern = _option_stems(opts)
    evidence: dict[str, float] = {}
    prosocial = threat = 0.0
    total = sum(len(content) for _, content in messages) or 1
    offset = 0
    digest = hashlib.blake2b(digest_size=32, person=b"simreport-off")
    digest.update(seed.to_bytes(8, "little", signed=False))
    digest.update(model.encode("utf-8"))
    pro_set, threat_set = set(PROSOCIAL), set(THREAT)
    for role, content in messages:
        digest.update(role.encode("utf-8"))
        digest.update(content.encode("utf-8"))
        role_weight = profile.system_weight if role == "system" else 1.0
        block_start = 0
        for block in content.split("\n\n"):
            if block.lower().startswith(ANSWER_MARK):
                block_start += len(block) + 2
                continue
            factor = role_weight * _block_factor(block, profile.structure_penalty)
            base = offset + block_start
            for match in pattern.finditer(block.lower()):
                stem = match.group(1)
                w = factor * (1.0 + profile.recency * (base + match.start()) / total)
                evidence[stem] = evidence.get(stem, 0.0) + w
                if stem in pro_set:
                    prosocial += w
                elif stem in threat_set:
                    threat += w
            block_start += len(block) + 2
        offset += len(content)
    mood = (prosocial - threat) / (3.0 + prosocial + threat)
    arousal = (prosocial + threat) / (3.0 + prosocial + threat)
    intensity_cues = sum(evidence.get(s, 0.0) for s in INTENSIFIERS)
    # Primacy for a binary choice; on a longer scale, a pull toward its middle.
    favoured = 0 if len(opts) <= 2 else len(opts) // 2
    noise = hashlib.blake2b(digest.digest(), digest_size=8 * len(opts)).digest()
    tau = max(temperature, profile.noise)
    best, best_score = opts[0], -math.inf
    for k, option in enumerate(opts):
        group = stems[k]
        support = sum(evidence.get(s, 0.0) for s in group) / len(group)
        score = profile.evidence * math.log1p(support)
        valence = sum(OPTION_VALENCE.get(s, 0.0) for s in group) / len(group)
        score += 2.0 * profile.valence * mood * valence
        if intense[k]:
            score += 0.4 * math.log1p(intensity_cues) + 1.2 * profile.valence * arousal - 0.6
        if k == favoured:
            score += profile.position_bias
        u = (int.from_bytes(noise[8 * k : 8 * k + 8], "little") + 0.5) / 2.0**64
        gumbel = -math.log(-math.log(u))
        total_score = score + tau * gumbel
        if total_score > best_score:
            best, best_score = option, total_score
    return best


class OfflineProvider(Provider):
    """Deterministic, network-free decisions from the rendered prompt (see the module docstring)."""

    name = "offline"

    def complete(self, request: ChatRequest) -> ChatResponse:
        pairs = [(m.role, m.content) for m in request.messages]
        options = request.options or _options_from_prompt(pairs[-1][1] if pairs else "")
        if not options:
            text = "I cannot tell what to answer."
        else:
            text = choose(pairs, options, request.model, request.temperature, request.seed)
        prompt_tokens = sum(estimate_tokens(c) for _, c in pairs)
        return ChatResponse(
            text=text, prompt_tokens=prompt_tokens, completion_tokens=estimate_tokens(text)
        )

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "model": self.config.model,
            "profile": asdict(profile_for(self.config.model)),
        }


@PROVIDERS.register("offline")
def _make(config: LLMConfig) -> Provider:
    return OfflineProvider(config)
