"""``multipart/form-data`` bodies, read the way PVE's API proxy reads an upload.

pveproxy streams the file part to ``/var/tmp/pveupload-<hex>`` and hands the API
method two parameters: ``tmpfilename`` (that path) and ``filename`` (the name the
client gave the file part). Plain parts become ordinary parameters. Here the
file's bytes stay with the request under that temporary name.
"""

from __future__ import annotations

import secrets
from email import policy
from email.parser import BytesParser

from proxmox_simulator.domain.errors import PveError


def parse_form(content_type: str, body: bytes) -> tuple[dict[str, str], dict[str, bytes]]:
    """(parameters, {tmpfilename: bytes}) of a multipart body."""
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode()
    message = BytesParser(policy=policy.HTTP).parsebytes(head + body)
    if not message.is_multipart():
        raise PveError("unable to parse multipart/form-data body", status=400)
    fields: dict[str, str] = {}
    files: dict[str, bytes] = {}
    for part in message.iter_parts():
        if part.get_content_disposition() != "form-data":
            continue
        name = part.get_param("name", header="content-disposition")
        if not name:
            continue
        data = part.get_payload(decode=True) or b""
        filename = part.get_filename()
        if filename is None:
            charset = part.get_content_charset() or "utf-8"
            fields[name] = data.decode(charset, "replace")
            continue
        tmpfilename = f"/var/tmp/pveupload-{secrets.token_hex(16)}"
        files[tmpfilename] = data
        fields["tmpfilename"] = tmpfilename
        fields[name] = filename
    return fields, files
