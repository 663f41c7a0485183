"""A content-keyed cache of deterministic (temperature-0) server responses, in SQLite.

Key: sha256 of the canonical JSON of ``{"model": served model name, "body": request body}``,
where the body's image URL is replaced by the sha256 of the image bytes (so a moved image, a
data URL or a ``file://`` URL of the same bytes hit the same entry, and the key never holds
image data). The endpoint URL is not part of the key: replicas of one served model answer
alike. The value is the server's raw JSON answer, parsed again on every read, so a change in
halluprobe's parsing never serves stale readouts.

The database lives in ``$HALLUPROBE_CACHE_DIR`` or else ``platformdirs.user_cache_dir("halluprobe")``,
file ``responses.sqlite``. WAL journal: readers never block the writer, several processes (the
shards of one job on one node) can share it, and a crash leaves the last committed state
(every insert is its own transaction). WAL needs a local file system, not NFS.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

__all__ = ["ResponseCache", "cache_dir", "cache_key"]

log = logging.getLogger(__name__)

_FILE = "responses.sqlite"


def cache_dir() -> Path:
    """``$HALLUPROBE_CACHE_DIR`` or the user cache directory of halluprobe."""
    override = os.environ.get("HALLUPROBE_CACHE_DIR")
    if override:
        return Path(override).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("halluprobe"))


def cache_key(model: str, body: dict[str, Any]) -> str:
    """sha256 (hex) of the served model name and the request body (images already replaced by hashes)."""
    canonical = json.dumps({"model": model, "body": body}, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class ResponseCache:
    """One SQLite file; use from one thread (the backend's event-loop thread opens its own)."""

    def __init__(self, directory: Path | None = None) -> None:
        self.path = (directory or cache_dir()) / _FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, model TEXT NOT NULL, "
            "response TEXT NOT NULL, created REAL NOT NULL)"
        )

    def get(self, key: str) -> str | None:
        row = self._db.execute("SELECT response FROM responses WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def put(self, key: str, model: str, response: str) -> None:
        try:
            self._db.execute(
                "INSERT OR REPLACE INTO responses (key, model, response, created) VALUES (?, ?, ?, ?)",
                (key, model, response, time.time()),
            )
        except sqlite3.Error as err:  # a full disk or a locked file must not fail the request
            log.warning("response cache write failed (%s): %s", self.path, err)

    def close(self) -> None:
        self._db.close()
