"""Job engines that run the approved calls of background tools (``@tool(background=True)``) apart
from the API servers: :mod:`dcaf_like.jobs.celery` (``pip install "dcaf-like[celery]"``). The
port they implement is :class:`~dcaf_like.application.executors.ToolExecutor`."""
