"""How a tool asks the user before it acts: it raises :class:`UserInputRequired` (or calls
``context.ask``, which raises it when the question has no answer yet); the turn turns it into an open
:class:`~dcaf_like.domain.Question`, and once it is answered runs the tool again, the answer in its
``ToolContext.answers``. Asking must come before acting: the tool's first run is abandoned."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dcaf_like.domain import Conversation, InvalidQuestion, Question
from dcaf_like.domain.question import MAX_TEXT_ANSWER, QuestionKind


class UserInputRequired(Exception):
    """Raised by a tool that needs the user's answer before it acts. `kind` is ``"text"`` (free text,
    at most `max_length` characters), ``"confirmation"`` (yes or no: the answer is a bool) or
    ``"selection"`` (one of `options`)."""

    def __init__(
        self,
        question: str,
        *,
        kind: QuestionKind | str = QuestionKind.TEXT,
        options: Sequence[str] | None = None,
        max_length: int = MAX_TEXT_ANSWER,
    ) -> None:
        if options is not None and kind == QuestionKind.TEXT:
            kind = QuestionKind.SELECTION  # options given: a choice among them
        self.question = question
        self.kind = str(kind)
        self.options = tuple(options or ())
        self.max_length = max_length
        super().__init__(f"the tool asks the user: {question}")


@dataclass(frozen=True, slots=True)
class Answered:
    """A question the call asked and the user answered: what a tool run again finds in its context."""

    kind: str
    question: str
    options: tuple[str, ...]
    value: str | bool

    def answers(self, kind: str, question: str, options: Sequence[str]) -> bool:
        return self.kind == kind and self.question == question and self.options == tuple(options)


def answers_to(conversation: Conversation, call_id: str) -> tuple[Answered, ...]:
    """The questions the call asked and the user answered, for its next run's context."""
    return tuple(
        Answered(q.kind.value, q.prompt, tuple(q.options), value)
        for q in conversation.answered_questions(call_id)
        if (value := q.value) is not None
    )


def open_question(
    conversation: Conversation, call_id: str, asked: UserInputRequired, *, ttl: float | None, at: float
) -> Question | None:
    """Open the question a tool asked, the call waiting for it; or fail the call (None) for a
    question that cannot be asked, or one it already had answered (a tool that ignores answers
    would ask forever)."""
    answered = conversation.answered_questions(call_id)
    if any(q.asks(asked.kind, asked.question, asked.options) for q in answered):
        problem = f"asked again a question the user already answered: {asked.question!r}"
        conversation.record_tool_failure(call_id, problem, at=at)
        return None
    try:
        return conversation.ask_question(
            call_id, asked.kind, asked.question, asked.options, max_length=asked.max_length, ttl=ttl, at=at
        )
    except InvalidQuestion as exc:
        conversation.record_tool_failure(call_id, f"asked a question that cannot be asked: {exc}", at=at)
        return None
