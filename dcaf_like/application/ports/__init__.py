"""Ports: what the application needs from the outside world, in its own types. One module a family:

- :mod:`~dcaf_like.application.ports.runtime`: :class:`AgentRuntime`, the model behind an agent. It
  implements one method (``invoke``); the others have defaults.
- :mod:`~dcaf_like.application.ports.store`: where conversations live. A store implements two methods
  (:class:`ConversationStore`: ``get`` and ``save``, compare-and-set) and declares what it does besides
  by subclassing a capability: :class:`AuditTrail`, :class:`CancelFlags`, :class:`Listing`,
  :class:`Retention`, :class:`WaitingIndex`; :class:`ConversationRepository` is all of them, as the
  built-in stores are. An action that needs a capability its store lacks is refused by name
  (:func:`require`).
- :mod:`~dcaf_like.application.ports.tools`: :class:`ExecutableTool`, what a running tool sees
  (:class:`ToolContext`) and returns (:class:`ToolOutput`).
- :mod:`~dcaf_like.application.ports.approvals`: a synchronous approver (:class:`ApprovalCallback`).
- :mod:`~dcaf_like.application.ports.served`: what the inbound adapters need of an agent
  (:class:`ServedAgent`, :class:`ToolProvider`).

The sync/async twins have defaults both ways, so an adapter writes only what its technology offers
natively (as httpx's transports do). Import the names from here.
"""

from dcaf_like.application.ports.approvals import ApprovalAnswer, ApprovalCallback, PendingApproval
from dcaf_like.application.ports.runtime import AgentRuntime
from dcaf_like.application.ports.served import ServedAgent, ToolProvider
from dcaf_like.application.ports.store import (
    READ_CONCURRENCY,
    AuditTrail,
    CancelFlags,
    ConversationRepository,
    ConversationStore,
    GrantStore,
    Listing,
    Position,
    Retention,
    WaitingIndex,
    acancel_requested,
    agrants_in_force,
    arecord_decisions,
    cancel_requested,
    grants_in_force,
    record_decisions,
    require,
)
from dcaf_like.application.ports.tools import (
    CancelSignal,
    ExecutableTool,
    NoPreview,
    ToolCancelled,
    ToolContext,
    ToolOutput,
)

__all__ = [
    "READ_CONCURRENCY",
    "AgentRuntime",
    "ApprovalAnswer",
    "ApprovalCallback",
    "AuditTrail",
    "CancelFlags",
    "ConversationRepository",
    "ConversationStore",
    "ExecutableTool",
    "GrantStore",
    "Listing",
    "PendingApproval",
    "Position",
    "Retention",
    "ServedAgent",
    "CancelSignal",
    "NoPreview",
    "ToolCancelled",
    "ToolContext",
    "ToolOutput",
    "ToolProvider",
    "WaitingIndex",
    "acancel_requested",
    "agrants_in_force",
    "arecord_decisions",
    "cancel_requested",
    "grants_in_force",
    "record_decisions",
    "require",
]
