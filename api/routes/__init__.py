"""The routers: REST under /v1 (jobs, ops, tilings and tables, targets and workers), the
service endpoints (health, metrics) and the dashboard."""

from tilewise.api.routes import dashboard, jobs, ops, service, tilings

__all__ = ["dashboard", "jobs", "ops", "service", "tilings"]
