"""How a tool asks the user before it acts: it raises :class:`UserInputRequired` (or calls
``context.ask``, which raises it when the question has no answer yet); the turn turns it into an open
:class:`~dcaf_like.domain.Question`, and once it is answered runs the tool again, the answer in its
``ToolContext.answers``. Asking must come before acting: the tool's first run is abandoned."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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
