"""The REST service and dashboard of tilewise (FastAPI): ``create_app(settings)``.

Routes live under ``/v1`` (jobs, ops, tilings, tables, targets, workers), with ``/healthz``,
``/metrics``, the dashboard at ``/`` and the OpenAPI UI at ``/docs``.
"""

from tilewise.api.app import create_app

__all__ = ["create_app"]
