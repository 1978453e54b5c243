"""UPIDs in PVE's nine-field format.

``UPID:<node>:<pid 8 hex>:<pstart 8 hex>:<starttime 8 hex>:<type>:<id>:<user>:``
The user field is ``user@realm`` or ``user@realm!tokenid`` for token-started tasks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_UPID = re.compile(
    r"^UPID:(?P<node>[a-zA-Z0-9][a-zA-Z0-9.-]*):(?P<pid>[0-9A-F]{8}):(?P<pstart>[0-9A-F]{8}):"
    r"(?P<starttime>[0-9A-F]{8}):(?P<type>[^:\s]+):(?P<id>[^:\s]*):(?P<user>[^:\s]+):$"
)


@dataclass(frozen=True)
class Upid:
    node: str
    pid: int
    pstart: int
    starttime: int
    type: str
    id: str
    user: str  # user@realm or user@realm!token

    def __str__(self) -> str:
        return (
            f"UPID:{self.node}:{self.pid:08X}:{self.pstart:08X}:{self.starttime:08X}:"
            f"{self.type}:{self.id}:{self.user}:"
        )

    @property
    def userid(self) -> str:
        return self.user.split("!", 1)[0]

    @property
    def tokenid(self) -> str | None:
        return self.user.split("!", 1)[1] if "!" in self.user else None

    @classmethod
    def parse(cls, text: str) -> Upid:
        match = _UPID.match(text)
        if not match:
            raise ValueError(f"unable to parse worker upid '{text}'")
        return cls(
            node=match["node"],
            pid=int(match["pid"], 16),
            pstart=int(match["pstart"], 16),
            starttime=int(match["starttime"], 16),
            type=match["type"],
            id=match["id"],
            user=match["user"],
        )
