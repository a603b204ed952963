"""The stored schema of a conversation's records, declared once; every form a store keeps derives from it.

A record (a tool call, a message, a task, a summary) is stored field by field, in the order of its
dataclass (``dataclasses.fields``), each field in the way its type says (:data:`_KINDS`). From that one
list come the five functions of :class:`RecordForms`:

- ``to_dict`` / ``from_dict``: the JSON-ready dict (``from_dict`` also reads records written before a
  field existed: :data:`ADDED`);
- ``write``: the same dict's JSON text, exactly as ``json.dumps(..., ensure_ascii=False,
  separators=(",", ":"))`` writes it, without building the dict (what every persistent store writes);
- ``to_tuple`` / ``from_tuple`` (``from_tuples``): a tuple of plain values, what the in-memory store
  keeps.

The functions are generated on first use (as ``dataclasses`` generates ``__init__``): written out,
they are the code one would write by hand for each record, and cost what it costs;
``RecordForms.source`` shows them. A new field of a record needs no edit here if its type is one of
:data:`_KINDS`, and an entry in :data:`ADDED` saying what older records read as; a field that is not
stored is ``init=False``.

The conversation itself is declared the same way (:data:`CONVERSATION`, at the end): its header is the
fields of ``Conversation`` a store keeps, so a new one is a field of the domain and an :data:`ADDED`
entry here.
"""

from __future__ import annotations

import dataclasses
import json
import linecache
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, Generic, TypeVar

from dcaf_like.domain import (
    ONE_APPROVER,
    Approval,
    Approvers,
    Attachment,
    ContextSummary,
    Conversation,
    DeciderKind,
    Message,
    MessageContent,
    PartKind,
    PlatformContext,
    Question,
    Stage,
    TaskRecord,
    ToolCall,
    ToolCallId,
    ToolInput,
)
from dcaf_like.domain.approvers import escalation_from, escalation_to_dict
from dcaf_like.domain.conversation import QueuedMessage

R = TypeVar("R")

# What json.dumps(ensure_ascii=False, separators=(",", ":")) does, for the writers' unusual values.
dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
# The escaping json.dumps(ensure_ascii=False) uses; a StrEnum member is a str, written as its value.
string = json.encoder.encode_basestring


def number(value: float) -> str:
    # json.dumps writes a finite float or an int as its repr; anything else goes the generic way.
    if (type(value) is float and value - value == 0) or type(value) is int:
        return repr(value)
    return dumps(value)


def integer(value: int) -> str:
    return repr(value) if type(value) is int else dumps(value)


def boolean(value: bool) -> str:
    return "true" if value is True else "false" if value is False else dumps(value)


@dataclass(frozen=True)
class Kind:
    """How one type of field is stored. Each is an expression: ``{v}`` the attribute's value, ``{x}``
    the stored one (templates use double quotes only: they end up in single-quoted f-strings)."""

    to_dict: str = "{v}"
    write: str = "{v}"
    read: str = "{x}"
    to_tuple: str | None = None  # None: as to_dict (a tuple must hold no list: the GC tracks those)
    thaw: str | None = None  # the value from its tuple form, ``{x}`` (None: as read)
    names: tuple[tuple[str, Any], ...] = ()  # what the expressions name, besides the helpers above
    omitted_when_empty: bool = False  # not written when empty (read back as empty: an ADDED entry)
    is_set: str = "{v}"  # what "not empty" means for a field omitted when empty (or SPARSE)

    def optional(self) -> Kind:
        """The same type or None."""

        def either(template: str, none: str, value: str) -> str:
            return template if template == value else f"({none} if {value} is None else {template})"

        return Kind(
            to_dict=either(self.to_dict, "None", "{v}"),
            write=either(self.write, '"null"', "{v}"),
            read=either(self.read, "None", "{x}"),
            to_tuple=None if self.to_tuple is None else either(self.to_tuple, "None", "{v}"),
            thaw=None if self.thaw is None else either(self.thaw, "None", "{x}"),
            names=self.names,
        )


def _enum(kind: type[StrEnum]) -> Kind:
    """A member stored as its value; an unknown value is a KeyError (an unreadable record)."""
    table = f"_{kind.__name__}"
    return Kind("{v}._value_", "string({v})", f"{table}[{{x}}]", names=((table, {m.value: m for m in kind}),))


_TEXT = Kind(write="string({v})")
_KINDS: dict[Any, Kind] = {
    str: _TEXT,
    float: Kind(write="number({v})"),
    int: Kind(write="integer({v})"),
    bool: Kind(write="boolean({v})"),
    ToolCallId: Kind(
        "{v}.value", "string({v}.value)", "ToolCallId({x})", names=(("ToolCallId", ToolCallId),)
    ),
    ToolInput: Kind(
        "{v}.canonical_json",
        "string({v}.canonical_json)",
        "ToolInput({x})",
        names=(("ToolInput", ToolInput),),
    ),
    MessageContent: Kind(
        "{v}.text", "string({v}.text)", "MessageContent({x})", names=(("MessageContent", MessageContent),)
    ),
    list[str]: Kind("list({v})", '"[" + ",".join(map(string, {v})) + "]"', "list({x})", "tuple({v})"),
    tuple[str, ...]: Kind("list({v})", '"[" + ",".join(map(string, {v})) + "]"', "tuple({x})", "{v}"),
    frozenset[str]: Kind(
        "sorted({v})", '"[" + ",".join(map(string, sorted({v}))) + "]"', "frozenset({x})", "tuple({v})"
    ),
}


def _attachments_to_list(parts: tuple[Attachment, ...]) -> list[dict[str, Any]]:
    return [{k: v for k, v in (("kind", p.kind._value_), ("media_type", p.media_type), ("data", p.data),
             ("url", p.url), ("name", p.name)) if v is not None} for p in parts]  # fmt: skip


def _attachments_from_list(stored: Sequence[Any]) -> tuple[Attachment, ...]:
    """Attachments from their stored dicts (or as they are: the in-memory tuple form keeps them)."""
    return tuple(
        p
        if isinstance(p, Attachment)
        else Attachment(PartKind(p["kind"]), p["media_type"], p.get("data"), p.get("url"), p.get("name"))
        for p in stored
    )


_KINDS[tuple[Attachment, ...]] = Kind(
    "_attachments_to_list({v})",
    "dumps(_attachments_to_list({v}))",
    "_attachments_from_list({x})",
    "{v}",
    names=(("_attachments_to_list", _attachments_to_list), ("_attachments_from_list", _attachments_from_list),
           ("dumps", dumps)),
    omitted_when_empty=True,
)  # fmt: skip


def _approvers_to_dict(rule: Approvers) -> dict[str, Any]:
    stages = [{"count": s.count, "groups": sorted(s.groups)} for s in rule.stages]
    stored: dict[str, Any] = {"stages": stages, "requester_may_approve": rule.requester_may_approve}
    if rule.escalation is not None:  # absent before escalation, and from a rule without one
        stored["escalation"] = escalation_to_dict(rule.escalation)
    return stored


def _approvers_from(stored: Any) -> Approvers:
    """A call's rule from its stored dict (or as it is: the in-memory tuple form keeps it)."""
    if isinstance(stored, Approvers):
        return stored
    stages = tuple(Stage(s["count"], frozenset(s["groups"])) for s in stored["stages"])
    return Approvers(stages, stored["requester_may_approve"], escalation_from(stored.get("escalation")))


def _approvals_to_list(approvals: tuple[Approval, ...]) -> list[dict[str, Any]]:
    return [{"by": a.by, "at": a.at, "stage": a.stage, "fingerprint": a.fingerprint} for a in approvals]


def _approvals_from(stored: Sequence[Any]) -> tuple[Approval, ...]:
    return tuple(
        a if isinstance(a, Approval) else Approval(a["by"], a["at"], a["stage"], a["fingerprint"])
        for a in stored
    )


# Today's rule (one approver, anyone) is not written: a call stored so reads as one stored before teams.
_KINDS[Approvers] = Kind(
    "_approvers_to_dict({v})",
    "dumps(_approvers_to_dict({v}))",
    "_approvers_from({x})",
    "{v}",
    names=(
        ("_approvers_to_dict", _approvers_to_dict),
        ("_approvers_from", _approvers_from),
        ("dumps", dumps),
    ),
    omitted_when_empty=True,
    is_set="not {v}.is_default",
)
_KINDS[tuple[Approval, ...]] = Kind(
    "_approvals_to_list({v})",
    "dumps(_approvals_to_list({v}))",
    "_approvals_from({x})",
    "{v}",
    names=(
        ("_approvals_to_list", _approvals_to_list),
        ("_approvals_from", _approvals_from),
        ("dumps", dumps),
    ),
    omitted_when_empty=True,
)


def _kind(hint: Any) -> Kind:
    if typing.get_origin(hint) in (types.UnionType, typing.Union):
        others = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(others) == 1 and len(typing.get_args(hint)) == 2:
            return _kind(others[0]).optional()
    if isinstance(hint, type) and issubclass(hint, StrEnum):
        return _enum(hint)
    if hint in _KINDS:
        return _KINDS[hint]
    raise TypeError(f"no stored form for a field of type {hint!r}: add one to _KINDS in {__name__}")


# -- fields added since format 1 was first written ---------------------------------------------------
# What a record stored before the field existed reads as: a stored value, or a function of the stored
# record and the conversation's platform context that gives the field's value.


def _bound_context(data: dict[str, Any], context: PlatformContext) -> str:
    """A call stored before approvals were bound to a context: the conversation's stored context is the
    one of its last turn, the turn that proposed the calls still waiting."""
    return context.fingerprint


def _kind_of_old_record(data: dict[str, Any], context: PlatformContext) -> DeciderKind | None:
    """What decided a call stored before kinds were recorded, told by the names the server used."""
    decided_by = data["decided_by"]
    if decided_by is None:
        return None
    known = {"policy": DeciderKind.POLICY, "system": DeciderKind.SYSTEM, "approver": DeciderKind.APPROVER}
    return known.get(decided_by, DeciderKind.HUMAN)


ADDED: dict[type, dict[str, Any]] = {
    Message: {
        "runtime": None,  # absent before the runtime that answered was kept
        "attachments": (),  # absent before attachments, and whenever a message has none
    },
    ToolCall: {
        "secret_arguments": (),  # absent before secrets were marked
        # Absent before leases: such an approved call is settled as interrupted when next loaded.
        "lease_owner": None,
        "lease_expires_at": None,
        "context_fingerprint": _bound_context,
        "decided_by_kind": _kind_of_old_record,
        "result_attachments": (),  # absent before a tool's images were kept, and whenever it has none
        # Absent before approvals by teams, and whenever nobody authenticated asked, the call needs
        # today's one approver, or no approval counted yet (docs/approvals.md, "Approvals by teams").
        "requested_by": None,
        "approvers": ONE_APPROVER,
        "approvals": (),
        # Absent before outcomes were recorded (a view derives one from its status and error), and
        # before durations were kept: such a record is written back as it was.
        "outcome": None,
        "ran_for": None,
        # Absent before tools declared a risk, and whenever its tool declares none (docs/approvals.md,
        # "What the approver sees").
        "risk": None,
        # Absent before previews, and whenever its tool has none (ADR 38).
        "preview": None,
        "preview_kind": None,
        "preview_error": None,
        "preview_bound": False,
        # Absent before escalation, and while no reminder or escalation was sent (docs/approvals.md,
        # "Escalation").
        "reminded_at": None,
        "escalated_at": None,
        # Absent before a job's progress was kept, and whenever no tool of the call reported any
        # (docs/runs.md, "Tools on a job engine").
        "progress": None,
        "progress_fraction": None,
    },
    Question: {
        "expires_at": None,  # absent before questions expired: such a question waits as long as it takes
    },
}

# Written only when set (read back as the ADDED value): fields most records leave empty, so records
# without them are stored as they were before the field existed.
SPARSE: dict[type, frozenset[str]] = {
    Message: frozenset({"runtime"}),
    ToolCall: frozenset(
        {
            "requested_by",
            "outcome",
            "ran_for",
            "risk",
            "preview",
            "preview_kind",
            "preview_error",
            "preview_bound",
            "reminded_at",
            "escalated_at",
            "progress",
            "progress_fraction",
        }
    ),
}

# Stored under another name than the attribute's: an attribute renamed keeps the key it was first
# stored under, so records written before the rename read the same and no migration is needed.
KEYS: dict[type, dict[str, str]] = {
    Message: {"content": "text"},
    # ADR 20: one vocabulary for a call; the stored keys are format 1's.
    ToolCall: {"approval_reason": "policy_reason", "rejection_reason": "decision_note"},
}


# -- the generated forms --------------------------------------------------------------------------------


class RecordForms(Generic[R]):
    """The stored forms of one record type (see the module's docstring), generated when one is first
    used: importing the package builds nothing."""

    to_dict: Callable[[R], dict[str, Any]]
    from_dict: Callable[[dict[str, Any], PlatformContext], R]
    write: Callable[[R], str]
    to_tuple: Callable[[R], tuple[Any, ...]]
    from_tuple: Callable[[tuple[Any, ...]], R]
    from_tuples: Callable[[Sequence[tuple[Any, ...]]], list[R]]  # many, without a call each
    keys: tuple[str, ...]  # the stored names of the fields, in their order
    source: str  # the generated functions

    def __init__(self, record: type[R]) -> None:
        self.record = record

    def __getattr__(self, name: str) -> Any:
        """Only for a form not generated yet: generate them all (two threads may both do it, alike)."""
        if name == "record" or name.startswith("__"):
            raise AttributeError(name)
        vars(self).update(_generate(self.record))
        try:
            return vars(self)[name]
        except KeyError:
            raise AttributeError(name) from None


def _generate(record: type[Any]) -> dict[str, Any]:
    """The stored forms of `record`, a dataclass, from its fields."""
    hints = typing.get_type_hints(record)
    fields = [f for f in dataclasses.fields(record) if f.init]
    renamed, added = KEYS.get(record, {}), ADDED.get(record, {})
    unknown = (set(renamed) | set(added)) - {f.name for f in fields}
    if unknown:
        raise TypeError(f"{record.__name__} has no stored field {', '.join(sorted(unknown))}")
    namespace: dict[str, Any] = {
        "string": string,
        "number": number,
        "integer": integer,
        "boolean": boolean,
        record.__name__: record,
    }
    to_dict, write, reads, to_tuple, from_tuple, keys = [], [], [], [], [], []
    for i, f in enumerate(fields):
        kind = _kind(hints[f.name])
        namespace.update(kind.names)
        key = renamed.get(f.name, f.name)
        if not key.isidentifier():  # so that it needs no escaping in the generated code
            raise TypeError(f"a stored name is an identifier, not {key!r}")
        keys.append(key)
        v = f"r.{f.name}"
        if kind.omitted_when_empty or f.name in SPARSE.get(record, ()):
            if i == 0 or f.name not in added:
                raise TypeError(f"{key} may be omitted only after the first field, with an ADDED entry")
            is_set = kind.is_set.format(v=v)
            to_dict.append(f"**({{{key!r}: {kind.to_dict.format(v=v)}}} if {is_set} else {{}})")
            namespace[f"_key_{key}"] = f',"{key}":'
            write.append("{" + f'(_key_{key} + {kind.write.format(v=v)}) if {is_set} else ""' + "}")
        else:
            to_dict.append(f"{key!r}: {kind.to_dict.format(v=v)}")
            write.append(("{{" if i == 0 else ",") + f'"{key}":')
            write.append("{" + kind.write.format(v=v) + "}")
        to_tuple.append((kind.to_tuple or kind.to_dict).format(v=v))
        from_tuple.append((kind.thaw or kind.read).format(x=f"t[{i}]"))
        if f.name not in added:
            reads.append(kind.read.format(x=f"data[{key!r}]"))
        elif callable(added[f.name]):
            namespace[f"_absent_{f.name}"] = added[f.name]
            read = kind.read.format(x=f"data[{key!r}]")
            reads.append(f"({read} if {key!r} in data else _absent_{f.name}(data, context))")
        else:
            namespace[f"_absent_{f.name}"] = added[f.name]
            reads.append(kind.read.format(x=f"data.get({key!r}, _absent_{f.name})"))
    name = record.__name__
    source = "\n".join(
        [
            f"def to_dict(r):\n    return {{{', '.join(to_dict)}}}",
            f"def from_dict(data, context):\n    return {name}({', '.join(reads)})",
            f"def write(r):\n    return f'{''.join(write)}}}}}'",
            f"def to_tuple(r):\n    return ({', '.join(to_tuple)},)",
            f"def from_tuple(t):\n    return {name}({', '.join(from_tuple)})",
            f"def from_tuples(ts):\n    return [{name}({', '.join(from_tuple)}) for t in ts]",
        ]
    )
    filename = f"<stored forms of {name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)  # tracebacks
    exec(compile(source, filename, "exec"), namespace)
    functions = ("to_dict", "from_dict", "write", "to_tuple", "from_tuple", "from_tuples")
    return {**{f: namespace[f] for f in functions}, "keys": tuple(keys), "source": source}


def forms(record: type[R]) -> RecordForms[R]:
    """The stored forms of `record`, a dataclass whose fields are of the types :data:`_KINDS` knows."""
    return RecordForms(record)


CALL = forms(ToolCall)
MESSAGE = forms(Message)
TASK = forms(TaskRecord)
SUMMARY = forms(ContextSummary)
QUESTION = forms(Question)


# -- the conversation --------------------------------------------------------------------------------
# A conversation is stored as its header, the fields of Conversation a store keeps (all but NOT_STORED),
# in the order of ORDER, then any other in the order of the dataclass; its messages and calls are either
# inside it, a whole document (format 1), or stored apart, one record each, the header counting them
# (format 2, ADR 16). A new field of Conversation needs no edit here if its type has a kind, and an
# ADDED entry saying what conversations stored before it read as (SPARSE: written only when set).

#: The format of a whole document, and of a header.
FORMAT = 1
HEADER = 2

# Fields of Conversation a store does not keep: the events of the turn being served, its entrance,
# the decision records a store appends apart from the conversation, what changed since the last save,
# and what a windowed read left out.
NOT_STORED = frozenset(
    {
        "events",
        "entrance",
        "unsaved_decisions",
        "saved_messages",
        "changed_calls",
        "message_offset",
        "call_offset",
    }
)

# Stored apart from the header (ADR 16): in its place, the header holds how many there are.
APART = {"messages": "message_count", "tool_calls": "call_count"}

# The stored order of the fields format 1 was first written with.
ORDER = (
    "id",
    "version",
    "created_at",
    "platform_context",
    "session",
    "messages",
    "tool_calls",
    "tasks",
    "owner",
)

ADDED[Conversation] = {
    "tasks": (),  # absent before tasks
    "owner": None,  # absent before owners, and whenever no one in particular started it
    "summary": None,  # absent before summaries, and whenever it has none
    "cut": 0,  # absent before cuts, and whenever no context window cut it (ADR 25)
    "questions": (),  # absent before questions, and whenever its tools asked nothing
    "queued": (),  # absent before queued messages, and whenever none waits
    "title": None,  # absent before titles, and whenever it is untitled
}
SPARSE[Conversation] = frozenset({"owner", "summary", "cut", "title"})
# What "set" means for a SPARSE field, when not its truth (a conversation owned by "" keeps its owner).
SET: dict[type, dict[str, str]] = {Conversation: {"owner": "{v} is not None"}}


def _context_text(context: PlatformContext) -> str:
    return dumps(context.public()) if context else "{}"


def _json_text(value: Any) -> str:
    return dumps(value) if value else "{}"


def _queued_dicts(queued: Sequence[QueuedMessage]) -> list[dict[str, Any]]:
    return [{"text": q.text, "at": q.at} for q in queued]


def _queued_from(stored: Sequence[Any]) -> list[QueuedMessage]:
    return [QueuedMessage(q["text"], q["at"]) for q in stored]


def _window_text(c: Conversation) -> str:
    start, first_call = c.window_start()
    return "" if start == first_call == 0 else f',"window":[{start},{first_call}]'


def _records(record: RecordForms[Any], name: str, key: str) -> Kind:
    """A conversation's records of one type (`record`, the forms named `name`), by `key` (an expression
    of ``r``, the record): stored as their list, in order."""
    by_key = f"{{{{{key}: r for r in ({name}.from_dict(d, context) for d in {{x}})}}}}"
    return Kind(
        f"[{name}.to_dict(r) for r in {{v}}.values()]",
        f'"[" + ",".join(map({name}.write, {{v}}.values())) + "]"',
        by_key,
        f"tuple(map({name}.to_tuple, {{v}}.values()))",
        f"{{{{{key}: r for r in map({name}.from_tuple, {{x}})}}}}",
        names=((name, record),),
    )


_KINDS.update(
    {
        PlatformContext: Kind(
            "{v}.public()",
            "_context_text({v})",
            "context",  # read first, as the records read need it (see _generate_conversation)
            '(_context_text({v}) if {v} else "")',  # the in-memory form: "" when empty, nothing to parse
            "PlatformContext(json.loads({x}) if {x} else None)",
            names=(("_context_text", _context_text), ("PlatformContext", PlatformContext), ("json", json)),
        ),
        dict[str, Any]: Kind(
            "{v}",
            "_json_text({v})",
            "dict({x})",
            '(dumps({v}) if {v} else "")',  # a value that is not JSON fails here, as in a persistent store
            "(json.loads({x}) if {x} else {{}})",
            names=(("_json_text", _json_text), ("json", json), ("dumps", dumps)),
        ),
        ContextSummary: Kind(
            "SUMMARY.to_dict({v})",
            "SUMMARY.write({v})",
            "SUMMARY.from_dict({x}, context)",
            "SUMMARY.to_tuple({v})",
            "SUMMARY.from_tuple({x})",
            names=(("SUMMARY", SUMMARY),),
        ),
        list[Message]: Kind(
            "[MESSAGE.to_dict(r) for r in {v}]",
            '"[" + ",".join(map(MESSAGE.write, {v})) + "]"',
            "[MESSAGE.from_dict(d, context) for d in {x}]",
            names=(("MESSAGE", MESSAGE),),
        ),
        dict[str, ToolCall]: _records(CALL, "CALL", "r.id.value"),
        dict[str, TaskRecord]: _records(TASK, "TASK", "r.id"),
        dict[str, Question]: replace(_records(QUESTION, "QUESTION", "r.id"), omitted_when_empty=True),
        list[QueuedMessage]: Kind(
            "_queued_dicts({v})",
            "dumps(_queued_dicts({v}))",
            "_queued_from({x})",
            "tuple({v})",  # QueuedMessage: frozen, of str and float
            "list({x})",
            names=(("_queued_dicts", _queued_dicts), ("_queued_from", _queued_from), ("dumps", dumps)),
            omitted_when_empty=True,
        ),
    }
)


class ConversationForms:
    """The stored forms of a conversation, generated from Conversation's fields when one is first used:

    - ``to_dict`` / ``write``: a whole document (format 1), its dict and its JSON text;
    - ``header_to_dict`` / ``write_header``: its header (format 2), its messages and calls counted, and the
      window a windowed read starts at when it leaves something out (ADR 22);
    - ``from_dict``: a conversation from either, its messages and calls in place (a store reading a
      header puts the records it read there);
    - ``to_tuple`` / ``from_tuple(t, id, messages, calls)``: its header as a tuple of plain values, what the
      in-memory store keeps (without its id, the store's key: the version is first).
    """

    to_dict: Callable[[Conversation], dict[str, Any]]
    write: Callable[[Conversation], str]
    header_to_dict: Callable[[Conversation], dict[str, Any]]
    write_header: Callable[[Conversation], str]
    from_dict: Callable[[dict[str, Any]], Conversation]
    to_tuple: Callable[[Conversation], tuple[Any, ...]]
    from_tuple: Callable[[tuple[Any, ...], str, list[Message], dict[str, ToolCall]], Conversation]
    keys: tuple[str, ...]
    source: str

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        vars(self).update(_generate_conversation())
        try:
            return vars(self)[name]
        except KeyError:
            raise AttributeError(name) from None


def _generate_conversation() -> dict[str, Any]:
    """The stored forms of Conversation, from its fields (see ConversationForms)."""
    hints = typing.get_type_hints(Conversation)
    stored = [f.name for f in dataclasses.fields(Conversation) if f.name not in NOT_STORED]
    unknown = (set(ORDER) | set(ADDED[Conversation]) | set(APART)) - set(stored)
    if unknown:
        raise TypeError(f"Conversation has no stored field {', '.join(sorted(unknown))}")
    names = [*ORDER, *(n for n in stored if n not in ORDER)]
    added, sparse, is_set = ADDED[Conversation], SPARSE[Conversation], SET[Conversation]
    namespace: dict[str, Any] = {
        "string": string,
        "number": number,
        "integer": integer,
        "boolean": boolean,
        "Conversation": Conversation,
        "_window_text": _window_text,
    }
    whole: list[str] = []
    header: list[str] = []
    to_dict: list[str] = []
    to_header: list[str] = []
    reads: list[str] = []
    to_tuple: list[str] = []
    thaws: list[str] = []
    for name in names:
        kind = _kind(hints[name])
        namespace.update(kind.names)
        v = f"r.{name}"
        if name in APART:
            count = f"r.{APART[name]}"
            to_dict.append(f"{name!r}: {kind.to_dict.format(v=v)}")
            to_header.append(f"{name!r}: {count}")
            whole.append(f',"{name}":{{{kind.write.format(v=v)}}}')
            header.append(f',"{name}":{{{count}}}')
            reads.append(f"{name}={kind.read.format(x=f'data[{name!r}]')}")
            thaws.append(f"{name}={name}")
            continue
        if kind.omitted_when_empty or name in sparse:
            if name not in added:
                raise TypeError(f"{name} may be omitted only with an ADDED entry")
            when = is_set.get(name, kind.is_set).format(v=v)
            item = f"**({{{name!r}: {kind.to_dict.format(v=v)}}} if {when} else {{}})"
            namespace[f"_key_{name}"] = f',"{name}":'
            text = "{" + f'(_key_{name} + {kind.write.format(v=v)}) if {when} else ""' + "}"
        else:
            item = f"{name!r}: {kind.to_dict.format(v=v)}"
            text = f',"{name}":{{{kind.write.format(v=v)}}}'
        to_dict.append(item)
        to_header.append(item)
        whole.append(text)
        header.append(text)
        if name not in added:
            reads.append(f"{name}={kind.read.format(x=f'data[{name!r}]')}")
        else:
            namespace[f"_absent_{name}"] = added[name]
            reads.append(f"{name}={kind.read.format(x=f'data.get({name!r}, _absent_{name})')}")
        if name == "id":
            thaws.append("id=id")
        else:
            thaws.append(f"{name}={(kind.thaw or kind.read).format(x=f't[{len(to_tuple)}]')}")
            to_tuple.append((kind.to_tuple or kind.to_dict).format(v=v))
    source = "\n".join(
        [
            f"def to_dict(r):\n    return {{'format': {FORMAT}, {', '.join(to_dict)}}}",
            f"def header_to_dict(r):\n    return {{'format': {HEADER}, {', '.join(to_header)}, "
            "**({} if (w := r.window_start()) == (0, 0) else {'window': list(w)})}",
            f"def write(r):\n    return f'{{{{\"format\":{FORMAT}{''.join(whole)}}}}}'",
            f'def write_header(r):\n    return f\'{{{{"format":{HEADER}{"".join(header)}'
            "{_window_text(r)}}}'",
            "def from_dict(data):\n    context = PlatformContext(data['platform_context'])\n"
            f"    return Conversation({', '.join(reads)})",
            f"def to_tuple(r):\n    return ({', '.join(to_tuple)},)",
            f"def from_tuple(t, id, messages, tool_calls):\n    return Conversation({', '.join(thaws)})",
        ]
    )
    filename = "<stored forms of Conversation>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    exec(compile(source, filename, "exec"), namespace)
    functions = ("to_dict", "header_to_dict", "write", "write_header", "from_dict", "to_tuple", "from_tuple")
    return {**{f: namespace[f] for f in functions}, "keys": tuple(names), "source": source}


CONVERSATION = ConversationForms()
