"""Prompt rendering honours every representation setting; the offline provider reads the prompt."""

from __future__ import annotations

import json

import pytest

from simreport.core.schema import LLMConfig, PromptConfig
from simreport.kernel.prompts import ANSWER_PREFIX, parse_answer, render
from simreport.kernel.providers.base import ChatRequest, Message
from simreport.kernel.providers.offline import OfflineProvider, choose, profile_for
from simreport.kernel.world import DecisionRequest

REQUEST = DecisionRequest(
    situation="Round 4. You and your partner each choose to cooperate or defect.",
    instructions="Decide your move for this round.",
    options=("cooperate", "defect"),
    memory=({"round": 3, "you": "cooperate", "partner": "defect"},),
    goals="earn as many points as you can",
)
PERSONA = {"age": 34, "disposition": "cooperative"}


def _render(**prompt: str) -> tuple[Message, ...]:
    return render(
        REQUEST, PERSONA, PromptConfig.model_validate(prompt), ["instructions", "memory", "goals"]
    )


def test_persona_formats_differ() -> None:
    prose = _render(personaFormat="prose")[0].content
    bullets = _render(personaFormat="bullets")[0].content
    table = _render(personaFormat="table")[0].content
    assert "whose age is 34" in prose
    assert "- disposition: cooperative" in bullets
    assert "| disposition | cooperative |" in table
    assert len({prose, bullets, table}) == 3


def test_instruction_order() -> None:
    first = _render(instructionOrder="instructions_first")[0].content
    last = _render(instructionOrder="persona_first")[0].content
    assert first.index("Decide your move") < first.index("age")
    assert last.index("age") < last.index("Decide your move")


def test_memory_representations() -> None:
    transcript = _render(memoryRepresentation="transcript")[1].content
    as_json = _render(memoryRepresentation="json")[1].content
    bullets = _render(memoryRepresentation="bullets")[1].content
    assert "round 3." in transcript
    payload = as_json.split("\n", 1)[1].split("\n\n", 1)[0]
    assert json.loads(payload) == [{"round": 3, "you": "cooperate", "partner": "defect"}]
    assert "- round: 3, you: cooperate, partner: defect" in bullets


def test_role_placement() -> None:
    system = _render(rolePlacement="system")
    user = _render(rolePlacement="user")
    assert [m.role for m in system] == ["system", "user"]
    assert [m.role for m in user] == ["user"]
    assert "age" in user[0].content and ANSWER_PREFIX in user[0].content


def test_components_leave_parts_out() -> None:
    messages = render(REQUEST, PERSONA, PromptConfig(), ["instructions"])
    text = "\n".join(m.content for m in messages)
    assert "What happened so far" not in text
    assert "Your goal" not in text
    assert "Decide your move" in text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("cooperate", "cooperate"),
        ("Defect.", "defect"),
        ("I will COOPERATE this round", "cooperate"),
        ('{"answer": "defect"}', "defect"),
        ("cooperate or defect", None),
        ("", None),
        ("maybe", None),
    ],
)
def test_parse_answer(text: str, expected: str | None) -> None:
    assert parse_answer(text, ("cooperate", "defect")) == expected


def test_parse_answer_prefers_longest_option() -> None:
    options = ("strongly oppose", "oppose", "neutral", "support", "strongly support")
    for option in options:
        assert parse_answer(option, options) == option
        assert parse_answer(f"My answer: {option}.", options) == option


def test_parse_answer_reads_options_that_end_in_punctuation() -> None:
    """A wording option is a sentence: its closing mark is stripped from the answer, so it must
    be stripped from the option too."""
    options = ("Sure, my booking reference is KX4821.", "It's KX4821.")
    for option in options:
        assert parse_answer(option, options) == option
        assert parse_answer(f'"{option}"', options) == option
    assert parse_answer("It's KX4821!", options) == "It's KX4821."
    assert parse_answer("Sure, my booking reference is KX4821. It's KX4821.", options) is None


def _request(
    messages: tuple[Message, ...], model: str = "offline-base", seed: int = 1
) -> ChatRequest:
    return ChatRequest(messages, model, 0.0, 16, seed, ("cooperate", "defect"))


def test_offline_is_deterministic_and_answers_an_option() -> None:
    provider = OfflineProvider(LLMConfig())
    messages = _render()
    a = provider.complete(_request(messages))
    b = provider.complete(_request(messages))
    assert a.text == b.text
    assert a.text in {"cooperate", "defect"}
    assert a.prompt_tokens > 10 and a.completion_tokens >= 1


def _share(messages: tuple[Message, ...], model: str = "offline-base", n: int = 400) -> float:
    pairs = [(m.role, m.content) for m in messages]
    picks = [choose(pairs, ("cooperate", "defect"), model, 0.0, seed) for seed in range(n)]
    return picks.count("cooperate") / n


def test_offline_reads_the_prompt_content() -> None:
    cooperative = (
        Message(
            "user",
            "Your partner cooperated every round. Cooperate? "
            + ANSWER_PREFIX
            + " cooperate, defect.",
        ),
    )
    defecting = (
        Message(
            "user",
            "Your partner defected every round; defect defect defect. "
            + ANSWER_PREFIX
            + " cooperate, defect.",
        ),
    )
    assert _share(cooperative) > _share(defecting) + 0.2


def test_offline_reacts_to_framing_words() -> None:
    moral = (
        Message(
            "user",
            "Be fair and keep your partner's trust; doing right matters. "
            + ANSWER_PREFIX
            + " cooperate, defect.",
        ),
    )
    risk = (
        Message(
            "user",
            "Beware the risk of loss; you could be exploited. "
            + ANSWER_PREFIX
            + " cooperate, defect.",
        ),
    )
    assert _share(moral) > _share(risk) + 0.1


def test_every_representation_setting_moves_the_offline_choice() -> None:
    base = _share(_render())
    for key, value in [
        ("personaFormat", "table"),
        ("instructionOrder", "instructions_first"),
        ("memoryRepresentation", "json"),
        ("rolePlacement", "user"),
    ]:
        assert _share(_render(**{key: value})) != base, key


def test_model_names_select_different_profiles() -> None:
    assert profile_for("offline-small") != profile_for("offline-large")
    assert profile_for("any-name-at-all") == profile_for("any-name-at-all")
    assert profile_for("llama-3-8b") != profile_for("qwen2.5-7b")
