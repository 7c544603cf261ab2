"""The tests' throwaway PostgreSQL server: deploy/embedded_postgres.py (also what `vendue up --ha` runs),
re-exported under the name the test modules have always imported."""

from deploy.embedded_postgres import SERVICE_USER, PostgresServer, admin_url, run_sql

__all__ = ["SERVICE_USER", "PostgresServer", "admin_url", "run_sql"]
