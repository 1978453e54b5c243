"""What the components of `proxbox up` share: the options, the context their process
specs are built from, and the HTTP readiness probe.

Both `components` (the list of components) and `demo` (the simulator and backend
components) import this module; it imports neither, so the two depend one way only
(components -> demo).
"""

from __future__ import annotations

import http.client
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .progress import Reporter
from .services import Services


@dataclass
class UpOptions:
    host: str = "127.0.0.1"
    port: int = 8000
    web_workers: int = 2
    # The simulated cluster, the sync backend and their first sync (`up --no-demo`: off).
    demo: bool = True


@dataclass
class StackContext:
    """What components need to build their process specs."""

    data_dir: Path
    options: UpOptions
    services: Services
    env: dict[str, str]
    urls: dict[str, str] = field(default_factory=dict)
    # Facts components report to the launcher, e.g. that credentials were created.
    notes: dict[str, object] = field(default_factory=dict)
    # Shows the long steps (migrations, clone, first sync) as they run.
    reporter: Reporter = field(default_factory=lambda: Reporter(stream=sys.stderr))

    def log_file(self, name: str) -> Path:
        return self.data_dir / "logs" / f"{name}.log"


def http_answers(host: str, port: int, path: str) -> bool:
    """True once the server returns any non-5xx response on `path`."""
    try:
        conn = http.client.HTTPConnection(host, port, timeout=5)
        try:
            conn.request("GET", path, headers={"Accept": "application/json"})
            return conn.getresponse().status < 500
        finally:
            conn.close()
    except OSError:
        return False
