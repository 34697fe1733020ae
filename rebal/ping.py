"""Dead-man pings: a replication job tells a monitor outside the file server when it starts
and how it ended, so a file server that stops running its jobs (dead, its timer stopped) is noticed
by the monitor's missing ping, not by the file server's own records.

The convention is healthchecks.io's, which Uptime Kuma's and many others' push monitors follow as
well: a POST to `URL/start` when the run starts, to `URL` when it succeeded, to `URL/fail` when it
failed, with the run's last lines as the body (the monitor shows them). A ping that does not get
through never changes the run's outcome: it is said in the run's warnings."""

from __future__ import annotations

import http.client
import urllib.error
import urllib.request

TIMEOUT = 10  # seconds: a monitor that does not answer must not hold the run up for long
BODY_MAX = 10_000  # healthchecks.io keeps the first 100 kB; the run's end is what matters


def url_for(base: str, event: str) -> str:
    """The URL of ``event`` (start, success, fail) under the job's ping URL."""
    base = base.rstrip("/")
    return base if event == "success" else f"{base}/{event}"


def ping(base: str, event: str, body: str = "", timeout: float = TIMEOUT) -> str | None:
    """POST ``body`` to the event's URL; None when it got through, else why not (one line)."""
    data = body.encode()[-BODY_MAX:]
    req = urllib.request.Request(url_for(base, event), data=data, method="POST",
                                 headers={"Content-Type": "text/plain; charset=utf-8", "User-Agent": "rebal"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            if not 200 <= r.status < 300:
                return f"the {event} ping to {base} got HTTP {r.status}"
    except urllib.error.HTTPError as e:
        return f"the {event} ping to {base} got HTTP {e.code}"
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as e:
        reason = getattr(e, "reason", e)
        return f"the {event} ping to {base} did not get through ({reason})"
    return None
