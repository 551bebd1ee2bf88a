"""The REST service and dashboard of tilewise (FastAPI): ``create_app(settings)``.

Routes live under ``/v1`` (jobs, ops, tilings, tables, targets, workers), with ``/healthz``,
``/metrics``, the dashboard at ``/`` and the API documentation at ``/docs`` (Swagger UI) and
``/redoc``, both from local assets.
"""

from tilewise.api.app import create_app

__all__ = ["create_app"]
