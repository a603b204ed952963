"""The inbound HTTP adapter: the HelpDesk protocol over FastAPI. Imports FastAPI; import it lazily."""

from dcaf_like.adapters.http.app import ServedAgent, as_served, create_app

__all__ = ["ServedAgent", "as_served", "create_app"]
