"""Tell the admin: email (SMTP), a webhook (HTTP POST of JSON), and/or a command.

Sent when something changes state (a health check's level, a job's outcome) and again after
`reminder_hours` while it lasts; a return to OK is sent once. The last state sent per subject is
kept in SQLite, so a daemon restart does not repeat or lose a message.
"""

from __future__ import annotations

import sqlite3

import json
import logging
import smtplib
import socket
import ssl
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from email.message import EmailMessage

from . import state
from .config import Email, Notify, Webhook
from .outcome import Outcome

log = logging.getLogger(__name__)


@dataclass
class Message:
    subject: str
    body: str
    level: str  # OK, WARNING, CRITICAL, FAILED, RECOVERED, TEST
    data: dict


def channels(cfg: Notify) -> list[str]:
    return [n for n in ("email", "webhook", "command") if getattr(cfg, n)]


def send(cfg: Notify, msg: Message) -> dict[str, str]:
    """Send to every configured channel; returns channel -> "ok" or the error. Never raises."""
    results: dict[str, str] = {}
    sends: list[tuple[str, Callable[[], None]]] = []
    if cfg.email is not None:
        sends.append(("email", partial(_email, cfg.email, msg)))
    if cfg.webhook is not None:
        sends.append(("webhook", partial(_webhook, cfg.webhook, msg)))
    if cfg.command:
        sends.append(("command", partial(_command, cfg.command, msg)))
    for name, fn in sends:
        try:
            fn()
            results[name] = Outcome.OK
        except Exception as e:  # a channel failing must not stop the others or the daemon
            results[name] = f"{type(e).__name__}: {e}"
            log.warning("notification by %s failed: %s", name, e)
    return results


def _email(e: Email, msg: Message) -> None:
    m = EmailMessage()
    m["From"] = e.sender
    m["To"] = ", ".join(e.to)
    m["Subject"] = msg.subject
    m.set_content(msg.body)
    with smtplib.SMTP(e.host, e.port, timeout=30) as s:
        if e.starttls:  # the certificate and the host name verified: a login never goes to an impostor
            s.starttls(context=ssl.create_default_context(cafile=e.ca_file))
        elif e.username and not e.plain_login:
            raise RuntimeError("starttls = false would send the password in clear (set plain_login = true to allow it)")
        if e.username:
            password = open(e.password_file).read().strip() if e.password_file else ""
            s.login(e.username, password)
        s.send_message(m)


def _webhook(w: Webhook, msg: Message) -> None:
    body = json.dumps({"subject": msg.subject, "level": msg.level, "text": msg.body, "host": socket.gethostname(),
                       "data": msg.data}).encode()
    req = urllib.request.Request(w.url, data=body, method="POST",
                                 headers={"Content-Type": "application/json", "User-Agent": "rebal"})
    with urllib.request.urlopen(req, timeout=30) as r:
        if r.status >= 300:
            raise RuntimeError(f"HTTP {r.status}")


def _command(argv: list[str], msg: Message) -> None:
    from .process.command import run

    r = run(argv, input=f"{msg.subject}\n\n{msg.body}\n", timeout=60, check=False,
            environ={"REBAL_LEVEL": msg.level, "REBAL_SUBJECT": msg.subject}, inherit_env=False)
    if r.returncode != 0:
        raise RuntimeError(f"exit {r.returncode}: {r.stderr.strip()[:200]}")


# -- on change, and reminders ----------------------------------------------------------------------


def maybe_notify(conn: sqlite3.Connection, cfg: Notify, subject: str, level: str, summary: str, body: str, data: dict,
                 now: float | None = None) -> dict[str, str] | None:
    """Send if ``subject``'s level or findings changed, or as a reminder. Returns what was sent."""
    now = time.time() if now is None else now
    row = state.notice(conn, subject)
    digest = summary
    host = socket.gethostname()
    if row is None:
        changed = level != "OK"
        prev_level = "OK"
    else:
        prev_level = row[0]
        changed = (level, digest) != (row[0], row[1])
    reminder = (not changed and level != "OK" and row is not None and row[3] is not None
                and now - row[3] >= cfg.reminder_hours * 3600)
    sent = None
    if changed or reminder:
        if level == "OK":
            label = "RECOVERED"
            subj = f"[rebal {host}] RECOVERED {subject}"
        else:
            label = level
            subj = f"[rebal {host}] {level} {subject}" + (" (reminder)" if reminder else "")
        if level == "OK" and prev_level == "OK":
            sent = None
        else:
            sent = send(cfg, Message(subj, body, label, data | {"subject": subject, "previous": prev_level}))
    last_sent = now if sent is not None else (row[3] if row else None)
    since = now if changed or row is None else row[2]
    state.set_notice(conn, subject, level, digest, since, last_sent)
    return sent


def notify_outcome(cfg: Notify, conn: sqlite3.Connection, subject: str, outcome: str, error: str | None) -> None:
    """A job's outcome: FAILED is sent on change and as a reminder, a later success once."""
    if not channels(cfg):
        return
    level = "OK" if outcome in (Outcome.OK, Outcome.WARNING, Outcome.INCOMPLETE, Outcome.STOPPED) else "CRITICAL"
    maybe_notify(conn, cfg, subject, level, f"{level}:{(error or '')[:80]}",
                 f"{subject}: {outcome}" + (f"\n{error}" if error else ""), {"outcome": outcome, "error": error})
