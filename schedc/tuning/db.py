"""The tuner's results, in an embedded SQLite database (default ``~/.cache/schedc/tune.sqlite``).

Two tables: ``checks`` (what the analysis and the build made of a point of a script, keyed by
the script's key, the function and the point) and ``measurements`` (a candidate on a device,
keyed by its CUDA source's hash, the device, the driver, schedc's version and the shape). A
rerun reuses both: a grown grid checks and times only its new points.
"""

from __future__ import annotations

import csv
import json
import sqlite3
import time
from dataclasses import asdict
from pathlib import Path

from .. import __version__
from ..errors import TuneError
from ..package.native import cache_root
from .results import Checked, Measured, Status, Task

_TABLES: dict[str, tuple[tuple[str, str], ...]] = {  # each table's columns, in order
    "checks": (("script_key", "TEXT"), ("function", "TEXT"), ("point", "TEXT"), ("status", "TEXT"),
               ("reason", "TEXT"), ("kind", "TEXT"), ("name", "TEXT"), ("source_hash", "TEXT"), ("directory", "TEXT")),
    "measurements": (("source_hash", "TEXT"), ("device", "TEXT"), ("driver", "TEXT"), ("schedc", "TEXT"),
                     ("shape", "TEXT"), ("script", "TEXT"), ("function", "TEXT"), ("name", "TEXT"), ("point", "TEXT"),
                     ("status", "TEXT"), ("median", "REAL"), ("stats", "TEXT"), ("batches", "INTEGER"),
                     ("iterations", "INTEGER"), ("flops", "INTEGER"), ("reason", "TEXT"), ("relative_error", "REAL"),
                     ("reference", "TEXT"), ("reference_median", "REAL"), ("measured_at", "REAL"),
                     ("confirmed", "INTEGER")),
}
_KEYS = {"checks": ("script_key", "function", "point"),
         "measurements": ("source_hash", "device", "driver", "schedc", "shape")}
_SCHEMA = "\n".join(f"CREATE TABLE IF NOT EXISTS {table} ({', '.join(f'{n} {t}' for n, t in columns)}, "
                     f"PRIMARY KEY ({', '.join(_KEYS[table])}));" for table, columns in _TABLES.items())

COLUMNS = ("script", "function", "shape", "point", "status", "median", "flops", "device", "driver", "schedc",
           "name", "reference", "reference_median", "relative_error", "confirmed", "reason", "source_hash",
           "measured_at")


def default_path() -> Path:
    """``$SCHEDC_CACHE/tune.sqlite`` or ``~/.cache/schedc/tune.sqlite``."""
    return cache_root() / "tune.sqlite"


class Database:
    """The results database (one connection, used by the tuner's own thread)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.connection = sqlite3.connect(self.path)
            self.connection.executescript(_SCHEMA)
            self._migrate()
        except (OSError, sqlite3.Error) as error:
            raise TuneError(f"--db {path}", f"cannot open the results database: {error}") from None

    def _migrate(self) -> None:
        """Add the columns a database written by an older schedc lacks (columns are only added)."""
        for table, columns in _TABLES.items():
            have = {row[1] for row in self.connection.execute(f"PRAGMA table_info({table})")}
            for name, kind in columns:
                if name not in have:
                    self.connection.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")
        self.connection.commit()

    def close(self) -> None:
        self.connection.close()

    # -- checks ------------------------------------------------------------------------------------

    def checked(self, script_key: str, function: str, point: str, task: Task) -> Checked | None:
        row = self.connection.execute(
            "SELECT status, reason, kind, name, source_hash, directory FROM checks "
            "WHERE script_key = ? AND function = ? AND point = ?", (script_key, function, point)).fetchone()
        if row is None:
            return None
        status, reason, kind, name, source_hash, directory = row
        if status == Status.COMPILED.value and not Path(directory, f"{name}.hat").is_file():
            return None  # its package left the cache: build it again
        return Checked(task, Status(status), reason, kind, name, source_hash, directory)

    def record_check(self, script_key: str, function: str, point: str, checked: Checked) -> None:
        with self.connection:
            self.connection.execute(
                f"INSERT OR REPLACE INTO checks ({', '.join(n for n, _ in _TABLES['checks'])}) "
                f"VALUES ({', '.join('?' * len(_TABLES['checks']))})",
                (script_key, function, point, checked.status.value, checked.reason, checked.kind, checked.name,
                 checked.source_hash, checked.directory))

    # -- measurements ------------------------------------------------------------------------------

    def measured(self, source_hash: str, device: dict, shape: str) -> Measured | None:
        row = self.connection.execute(
            "SELECT status, median, stats, batches, iterations, flops, reason, relative_error, reference, "
            "reference_median, confirmed FROM measurements WHERE source_hash = ? AND device = ? AND driver = ? "
            "AND schedc = ? AND shape = ?",
            (source_hash, device["device"], device["driver"], __version__, shape)).fetchone()
        if row is None:
            return None
        status, median, stats, batches, iterations, flops, reason, error, reference, reference_median, confirmed = row
        return Measured(Status(status), median, json.loads(stats), batches, iterations, flops, reason, error,
                        reference or "", reference_median or 0.0, confirmed=bool(confirmed))

    def record_measurement(self, source_hash: str, device: dict, shape: str, script: str, function: str,
                           name: str, point: str, m: Measured) -> None:
        with self.connection:
            self.connection.execute(
                f"INSERT OR REPLACE INTO measurements ({', '.join(n for n, _ in _TABLES['measurements'])}) "
                f"VALUES ({', '.join('?' * len(_TABLES['measurements']))})",
                (source_hash, device["device"], device["driver"], __version__, shape, script, function, name, point,
                 m.status.value, m.median, json.dumps(m.stats), m.batches, m.iterations, m.flops, m.reason,
                 m.relative_error, m.reference, m.reference_median, time.time(), int(m.confirmed)))

    def rows(self, script: str | None = None) -> list[dict]:
        """Every measurement (of one script's path), best first per function and shape."""
        where, args = ("WHERE script = ?", (script,)) if script else ("", ())
        cursor = self.connection.execute(
            f"SELECT {', '.join(COLUMNS)} FROM measurements {where} "
            "ORDER BY script, function, shape, status != 'timed', median", args)
        return [dict(zip(COLUMNS, row)) for row in cursor.fetchall()]

    def export(self, path: str | Path, script: str | None = None) -> int:
        """Write the measurements to ``path``: CSV, or JSON where it ends in .json. Returns the rows."""
        rows = self.rows(script)
        target = Path(path)
        if target.suffix == ".json":
            target.write_text(json.dumps(rows, indent=1) + "\n")
        else:
            with open(target, "w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=COLUMNS)
                writer.writeheader()
                writer.writerows(rows)
        return len(rows)


def as_dict(m: Measured) -> dict:
    out = asdict(m)
    out["status"] = m.status.value
    return out
