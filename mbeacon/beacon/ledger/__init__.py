"""The privacy ledger (budgets, SVT² state, answer cache, audit log) on SQLite or PostgreSQL."""

from mbeacon.beacon.ledger.database import Database, LedgerUnavailable, connect
from mbeacon.beacon.ledger.ledger import AuditRow, CachedAnswer, Ledger, User

__all__ = [
    "AuditRow",
    "CachedAnswer",
    "Database",
    "Ledger",
    "LedgerUnavailable",
    "User",
    "connect",
]
