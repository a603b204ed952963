"""A question a run asks the user (seed 000's USER_INPUT, CONFIRMATION, SELECTION), and its state machine.

A question belongs to the tool call that asked it: the built-in ``ask_user`` tool, or any tool that
asks before it acts. While it is open, the call waits (its status is ``asking``); the answer,
given once and checked here against the question's kind and options, lets the call run again.
A question asked with a window (:attr:`Question.expires_at`) takes no answer past it: the system
closes it as ``expired`` (the call fails, not run) when the conversation goes on.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from enum import StrEnum

from dcaf_like.domain.errors import DomainError

#: The longest prompt a question may have, and the longest text answer (unless a question says less).
MAX_PROMPT = 4000
MAX_TEXT_ANSWER = 4000
MAX_OPTIONS = 50
MAX_OPTION = 200

YES, NO = "yes", "no"


class InvalidQuestion(DomainError):
    """A question that cannot be asked as it is (a selection without options, an empty prompt, ...)."""


class InvalidAnswer(DomainError):
    """An answer the question does not take: a value outside its options, or of the wrong type."""

    def __init__(self, question_id: str, detail: str) -> None:
        self.question_id = question_id
        self.detail = detail
        super().__init__(f"question {question_id} does not take this answer: {detail}")


class UnknownQuestion(DomainError):
    """An answer names a question this conversation never asked (a forged id, another conversation's)."""

    def __init__(self, question_id: str, conversation_id: str) -> None:
        self.question_id = question_id
        self.conversation_id = conversation_id
        super().__init__(f"question {question_id} was never asked in conversation {conversation_id}")


class QuestionClosed(DomainError):
    """An answer to a question already answered or declined: a question is answered once."""

    def __init__(self, question_id: str, status: str) -> None:
        self.question_id = question_id
        self.status = status
        super().__init__(f"question {question_id} is {status}: a question is answered once")


class QuestionExpired(DomainError):
    """An answer (or a refusal to answer) to a question whose window closed: it is no longer taken."""

    def __init__(self, question_id: str) -> None:
        self.question_id = question_id
        super().__init__(f"question {question_id} expired: its window closed before an answer")


class OpenQuestions(DomainError):
    """A new user turn arrived while questions still wait for an answer."""

    def __init__(self, question_ids: list[str]) -> None:
        self.question_ids = question_ids
        ids = ", ".join(question_ids)
        super().__init__(f"questions waiting for an answer: {ids}; answer (or decline) them first")


class QuestionKind(StrEnum):
    TEXT = "text"  # free text, at most `max_length` characters
    CONFIRMATION = "confirmation"  # yes or no: the answer is a boolean
    SELECTION = "selection"  # one of `options`


class QuestionStatus(StrEnum):
    OPEN = "open"
    ANSWERED = "answered"
    DECLINED = "declined"  # the user would not answer: the call that asked fails
    EXPIRED = "expired"  # its window closed before an answer: the system closed it, the call fails


# The whole state machine: a question is answered, declined or expired once, and nothing leaves those.
_TRANSITIONS: frozenset[tuple[QuestionStatus, QuestionStatus]] = frozenset(
    {
        (QuestionStatus.OPEN, QuestionStatus.ANSWERED),
        (QuestionStatus.OPEN, QuestionStatus.DECLINED),
        (QuestionStatus.OPEN, QuestionStatus.EXPIRED),
    }
)


def can_transition(from_status: QuestionStatus, to_status: QuestionStatus) -> bool:
    return (from_status, to_status) in _TRANSITIONS


def new_question_id() -> str:
    """Server-minted and unguessable, as a tool call's id: an answer cannot be forged."""
    return "q_" + secrets.token_hex(12)


@dataclass(eq=False, slots=True)
class Question:
    """One question, asked by the tool call `call_id`. Every change goes through `_move`."""

    id: str
    call_id: str
    kind: QuestionKind
    prompt: str
    options: list[str] = field(default_factory=list)
    max_length: int = MAX_TEXT_ANSWER
    asked_at: float = 0.0
    status: QuestionStatus = QuestionStatus.OPEN
    #: The answer as stored: the text, the option chosen, or ``yes`` / ``no`` (see :attr:`value`).
    answer: str | None = None
    answered_by: str | None = None
    answered_at: float | None = None
    #: When its window closes (None: it waits for its answer as long as it takes).
    expires_at: float | None = None

    @classmethod
    def ask(
        cls,
        call_id: str,
        kind: QuestionKind | str,
        prompt: str,
        options: list[str] | tuple[str, ...] = (),
        *,
        max_length: int = MAX_TEXT_ANSWER,
        at: float,
        ttl: float | None = None,
    ) -> Question:
        """A new open question, checked: InvalidQuestion names what is wrong with it. With `ttl`, it
        takes an answer for that many seconds only."""
        try:
            kind = QuestionKind(kind)
        except ValueError:
            known = ", ".join(k.value for k in QuestionKind)
            raise InvalidQuestion(f"unknown question kind {kind!r}; the kinds are {known}") from None
        if not isinstance(prompt, str) or not prompt.strip():
            raise InvalidQuestion("a question needs a prompt")
        if len(prompt) > MAX_PROMPT:
            raise InvalidQuestion(f"a prompt is at most {MAX_PROMPT} characters")
        listed = list(options)
        if kind is QuestionKind.SELECTION:
            if not listed:
                raise InvalidQuestion("a selection needs options to choose from")
            if len(listed) > MAX_OPTIONS:
                raise InvalidQuestion(f"a selection offers at most {MAX_OPTIONS} options")
            if any(not isinstance(o, str) or not o or len(o) > MAX_OPTION for o in listed):
                raise InvalidQuestion(f"each option is a non-empty string of at most {MAX_OPTION} characters")
            if len(set(listed)) != len(listed):
                raise InvalidQuestion("the options of a selection are all different")
        elif listed:
            raise InvalidQuestion(f"only a selection has options, not a {kind.value} question")
        if not 1 <= max_length <= MAX_TEXT_ANSWER:
            raise InvalidQuestion(f"max_length is between 1 and {MAX_TEXT_ANSWER}")
        expires_at = None if ttl is None else at + ttl
        return cls(new_question_id(), call_id, kind, prompt, listed, max_length, at, expires_at=expires_at)

    @property
    def is_open(self) -> bool:
        return self.status is QuestionStatus.OPEN

    def is_expired(self, now: float) -> bool:
        """Open, and past its window: no answer is taken; the system closes it as expired."""
        return self.status is QuestionStatus.OPEN and self.expires_at is not None and now >= self.expires_at

    @property
    def value(self) -> str | bool | None:
        """The answer as the tool gets it: a bool for a confirmation, else the text or the option."""
        if self.answer is None:
            return None
        if self.kind is QuestionKind.CONFIRMATION:
            return self.answer == YES
        return self.answer

    def asks(self, kind: QuestionKind | str, prompt: str, options: list[str] | tuple[str, ...]) -> bool:
        """Whether this is the question `kind`, `prompt`, `options` (what a tool asking again finds)."""
        return self.kind == kind and self.prompt == prompt and self.options == list(options)

    def _move(self, to_status: QuestionStatus) -> None:
        if not can_transition(self.status, to_status):
            raise QuestionClosed(self.id, self.status.value)
        self.status = to_status

    def accept(self, value: object, *, by: str, at: float) -> None:
        """Take `value` as the answer: a bool for a confirmation, one of the options for a selection,
        a string of at most `max_length` characters for text. Refused, changing nothing, otherwise."""
        self._check_open(at)
        answer = self._checked(value)
        self._move(QuestionStatus.ANSWERED)
        self.answer = answer
        self.answered_by = by
        self.answered_at = at

    def decline(self, *, by: str, at: float) -> None:
        """The user will not answer; refused, as an answer is, once the question closed or expired."""
        self._check_open(at)
        self._move(QuestionStatus.DECLINED)
        self.answered_by = by
        self.answered_at = at

    def expire(self, *, by: str, at: float) -> None:
        """Its window closed before an answer: `by` (the system) closes it."""
        if self.is_open and not self.is_expired(at):
            raise DomainError(f"question {self.id} is open and its window is not closed")
        self._move(QuestionStatus.EXPIRED)
        self.answered_by = by
        self.answered_at = at

    def _check_open(self, at: float) -> None:
        if self.status is QuestionStatus.EXPIRED or self.is_expired(at):
            raise QuestionExpired(self.id)
        if not self.is_open:
            raise QuestionClosed(self.id, self.status.value)

    def _checked(self, value: object) -> str:
        if self.kind is QuestionKind.CONFIRMATION:
            if not isinstance(value, bool):
                raise InvalidAnswer(self.id, f"a confirmation is answered true or false, not {_shown(value)}")
            return YES if value else NO
        if not isinstance(value, str):
            raise InvalidAnswer(
                self.id, f"a {self.kind.value} question is answered with a string, not {_shown(value)}"
            )
        if self.kind is QuestionKind.SELECTION:
            if value not in self.options:
                raise InvalidAnswer(self.id, f"{value!r} is not one of the options {self.options}")
            return value
        if len(value) > self.max_length:
            raise InvalidAnswer(self.id, f"the answer is {len(value)} characters; at most {self.max_length}")
        return value


def _shown(value: object) -> str:
    return "null" if value is None else type(value).__name__
