"""The HelpDesk protocol (DuploCloud's chat protocol), in plain Python.

- :mod:`dcaf_like.helpdesk.protocol`: messages read into an :class:`~dcaf_like.AgentRequest` (each
  field checked once, a refusal naming it), responses and calls written back as the protocol's
  messages, stream events written as its NDJSON lines.
- :mod:`dcaf_like.helpdesk.function_agent`: custom agent functions ``(messages, context) ->
  AgentResult``, which receive the protocol's messages.

The application knows none of this: it takes an ``AgentRequest`` and returns typed results. The HTTP
routes (``dcaf_like/server/chat.py``), A2A, the terminal chat and ``Agent.run(messages)`` speak the
protocol through this package. Another protocol is another package beside it.
"""
