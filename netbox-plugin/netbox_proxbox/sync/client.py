"""HTTP adapter for the Proxbox sync backend's service API.

`POST /sync/{endpoint_id}` starts a run (202 {"run_id", "url"}; 409 while one is
active), `GET /runs/{run_id}` reads its state and, once finished, its report, and
`GET /runs/{run_id}/events` replays its events (a finite SSE stream once the run
has finished); `POST /sync/{endpoint_id}/preview` answers with a dry run's plan. Every failure becomes a `BackendError` whose message says what to
fix; the bearer token never appears in one.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator

import requests

from .config import BackendSettings

FINISHED = "finished"  # the backend's terminal run state


class BackendError(Exception):
    """The backend could not be asked or refused; the message is meant for the Job's error."""


class BackendUnavailable(BackendError):
    pass


class BackendRefused(BackendError):
    pass


class RunTimedOut(BackendError):
    pass


class BackendClient:
    def __init__(self, settings: BackendSettings, session: requests.Session | None = None):
        self.settings = settings
        self.session = session or requests.Session()
        if settings.token:
            self.session.headers["Authorization"] = f"Bearer {settings.token}"
        self.session.headers["Accept"] = "application/json"

    def close(self) -> None:
        self.session.close()

    def _request(self, method: str, path: str, **kwargs) -> requests.Response:
        url = f"{self.settings.url}{path}"
        kwargs.setdefault("timeout", self.settings.request_timeout)
        try:
            return self.session.request(method, url, **kwargs)
        except requests.RequestException as exc:
            # The exception's own text can be long and nested; its class says enough.
            raise BackendUnavailable(
                f"the sync backend at {self.settings.url} is unreachable "
                f"({type(exc).__name__}: {_first_line(exc)})"
            ) from None

    def start_sync(self, endpoint_id: int, target: dict | None = None) -> str:
        """Start a run; `target` ({"guest": "qemu/100"} or {"node": "pve1"}) narrows it."""
        params = None
        if target:
            # The backend takes one `target`: `qemu/100` or `node/pve1`.
            params = {"target": target["guest"] if "guest" in target else f"node/{target['node']}"}
        response = self._request("POST", f"/sync/{endpoint_id}", params=params)
        if response.status_code == 202:
            run_id = _json(response).get("run_id")
            if not run_id:
                raise BackendRefused("the sync backend accepted the sync but returned no run_id")
            return str(run_id)
        if response.status_code == 409:
            detail = _json(response).get("detail")
            active = detail.get("run_id") if isinstance(detail, dict) else None
            raise BackendRefused(
                "a sync of this endpoint is already running on the backend"
                + (f" (run {active})" if active else "")
            )
        raise self._refused("POST /sync", response)

    def preview(self, endpoint_id: int) -> dict:
        """A dry run's report (`POST /sync/{id}/preview`): the plan, nothing written.

        The backend plans while the request waits, so it may take as long as a sync's reads.
        """
        response = self._request(
            "POST",
            f"/sync/{endpoint_id}/preview",
            timeout=(self.settings.request_timeout, self.settings.sync_timeout),
        )
        if response.status_code != 200:
            raise self._refused("POST /sync/…/preview", response)
        report = _json(response)
        if not isinstance(report.get("plan"), dict):
            raise BackendRefused("the sync backend's preview answer has no plan")
        return report

    def run(self, run_id: str) -> dict:
        response = self._request("GET", f"/runs/{run_id}")
        if response.status_code != 200:
            raise self._refused("GET /runs", response)
        return _json(response)

    def wait(
        self,
        run_id: str,
        *,
        on_poll: Callable[[dict], None] = lambda run: None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        deadline: float | None = None,
    ) -> dict:
        """Poll the run until it has finished or the sync timeout (or `deadline`) has passed."""
        if deadline is None:
            deadline = clock() + self.settings.sync_timeout
        while True:
            run = self.run(run_id)
            on_poll(run)
            if run.get("state") == FINISHED:
                return run
            remaining = deadline - clock()
            if remaining <= 0:
                raise RunTimedOut(
                    f"the backend's run {run_id} had not finished after "
                    f'{self.settings.sync_timeout:g} s (PLUGINS_CONFIG["netbox_proxbox"]'
                    f'["sync_timeout"]); it may still be running (state {run.get("state")!r})'
                )
            sleep(min(self.settings.poll_interval, remaining))

    def events(self, run_id: str, deadline: float | None = None) -> Iterator[dict]:
        """The run's events in order, live until it finishes (SSE `data:` lines are JSON)
        or until `deadline` (time.monotonic()) has passed.

        A stream silent for longer than backend_request_timeout ends in BackendUnavailable.
        The backend sends keep-alive comments while a run is quiet, so the deadline is
        checked on every line, not only on events: a hung run still ends the wait.
        """
        # A hung run must not hold the Job past its sync timeout waiting for the next line.
        read = min(self.settings.request_timeout, self.settings.sync_timeout)
        response = self._request(
            "GET",
            f"/runs/{run_id}/events",
            stream=True,
            timeout=(self.settings.request_timeout, read),
        )
        if response.status_code != 200:
            raise self._refused("GET /runs/…/events", response)
        with response:
            try:
                for line in response.iter_lines(decode_unicode=True):
                    if deadline is not None and time.monotonic() > deadline:
                        return
                    if line and line.startswith("data:"):
                        try:
                            yield json.loads(line[5:].strip())
                        except ValueError:
                            continue
            except requests.RequestException as exc:
                raise BackendUnavailable(
                    f"the run's event stream broke off ({type(exc).__name__})"
                ) from None

    def _refused(self, what: str, response: requests.Response) -> BackendError:
        if response.status_code == 401:
            return BackendRefused(
                f"the sync backend refused {what} with 401: "
                'PLUGINS_CONFIG["netbox_proxbox"]["backend_token"] must equal the backend\'s '
                "PROXBOX_BACKEND_API_TOKEN"
            )
        detail = _json(response).get("detail") or response.text[:200]
        return BackendRefused(
            f"the sync backend answered {what} with {response.status_code}: {detail}"
        )


def _json(response: requests.Response) -> dict:
    try:
        data = response.json()
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else ""
