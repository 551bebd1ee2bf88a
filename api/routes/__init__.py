"""The routers: REST under /v1 (jobs, batches, ops, tilings and tables, workloads' records,
targets and workers), the service endpoints (health, metrics), the dashboard and the API's
documentation pages."""

from tilewise.api.routes import batches, dashboard, docs, jobs, ops, service, tilings, workloads

__all__ = ["batches", "dashboard", "docs", "jobs", "ops", "service", "tilings", "workloads"]
