"""The routers: REST under /v1 (jobs, ops, tilings and tables, workloads' records, targets and
workers), the service endpoints (health, metrics), the dashboard and the API's documentation
pages."""

from tilewise.api.routes import dashboard, docs, jobs, ops, service, tilings, workloads

__all__ = ["dashboard", "docs", "jobs", "ops", "service", "tilings", "workloads"]
