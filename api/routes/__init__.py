"""The routers: REST under /v1 (jobs, batches, ops, tilings and tables, targets and workers), the
service endpoints (health, metrics) and the dashboard."""

from tilewise.api.routes import batches, dashboard, jobs, ops, service, tilings

__all__ = ["batches", "dashboard", "jobs", "ops", "service", "tilings"]
