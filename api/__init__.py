"""The REST service (FastAPI) — routes under /v1 arrive with the service issue."""
