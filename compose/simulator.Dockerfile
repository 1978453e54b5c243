# The Proxmox VE API simulator alone (no NetBox), for compose/ and other runtimes.
# Build context: the repository root (see docker-compose.yml).
#   migrations and seeding are separate one-shot commands:
#     proxmox-simulator migrate
#     proxmox-simulator seed --profile small --seed 1 --if-empty
#   the service:  proxmox-simulator serve --host 0.0.0.0 --port 8006 --tls
FROM ghcr.io/astral-sh/uv:0.13.9 AS uv

FROM python:3.12-slim

COPY --from=uv /uv /uvx /bin/
ENV UV_PYTHON_DOWNLOADS=never \
    UV_PROJECT_ENVIRONMENT=/opt/venv \
    UV_LINK_MODE=copy \
    PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PROXMOX_SIMULATOR_DATA_DIR=/data

RUN groupadd --system --gid 10001 pvesim \
 && useradd --system --uid 10001 --gid pvesim --home-dir /data --no-create-home pvesim \
 && mkdir -p /data && chown pvesim:pvesim /data

WORKDIR /src
COPY . /src
# Only the simulator and what it imports (proxbox-redaction, proxbox-processes), from the
# workspace lock.
RUN uv sync --locked --no-dev --package proxmox-simulator

USER pvesim
VOLUME /data
EXPOSE 8006
HEALTHCHECK --interval=5s --timeout=5s --retries=30 CMD ["python", "-c", \
    "import ssl,urllib.request; urllib.request.urlopen('https://127.0.0.1:8006/readyz', context=ssl._create_unverified_context())"]
CMD ["proxmox-simulator", "serve", "--host", "0.0.0.0", "--port", "8006", "--tls"]
