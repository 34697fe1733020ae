"""Mail to the admin never hands the SMTP login to an impostor (issue 63): a real SMTP server
(aiosmtpd) on loopback with STARTTLS and a login, and real certificates made by openssl for the test."""

from __future__ import annotations

import ssl
import subprocess

import pytest
from conftest import rebal


def _cert(tmp_path, name: str, cn: str, ca: tuple | None = None) -> tuple:
    key, crt = tmp_path / f"{name}.key", tmp_path / f"{name}.crt"
    if ca is None:  # self-signed
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={cn}",
                        "-addext", "subjectAltName=IP:127.0.0.1", "-addext", "basicConstraints=critical,CA:TRUE",
                        "-keyout", str(key), "-out", str(crt)], check=True, capture_output=True)
        return key, crt
    csr = tmp_path / f"{name}.csr"
    ext = tmp_path / f"{name}.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1\n")
    subprocess.run(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={cn}", "-keyout", str(key),
                    "-out", str(csr)], check=True, capture_output=True)
    subprocess.run(["openssl", "x509", "-req", "-in", str(csr), "-CA", str(ca[1]), "-CAkey", str(ca[0]),
                    "-CAcreateserial", "-days", "2", "-extfile", str(ext), "-out", str(crt)], check=True, capture_output=True)
    return key, crt


@pytest.fixture
def smtp_tls():
    """Start an SMTP server with STARTTLS and AUTH on loopback; collect the logins it is given."""
    from aiosmtpd.controller import Controller
    from aiosmtpd.handlers import Message
    from aiosmtpd.smtp import AuthResult
    from sshenv import free_port

    made = []

    def start(key, crt):
        logins, mail = [], []

        class Keep(Message):
            def handle_message(self, message):
                mail.append(message)

        def auth(server, session, envelope, mechanism, data):
            logins.append((data.login, data.password))
            return AuthResult(success=True)

        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(str(crt), str(key))
        c = Controller(Keep(), hostname="127.0.0.1", port=free_port(), tls_context=ctx, require_starttls=True,
                       authenticator=auth, auth_require_tls=True)
        c.start()
        c.logins, c.mail = logins, mail
        made.append(c)
        return c

    yield start
    for c in made:
        c.stop()


def _config(tmp_path, port: int, extra: str = "") -> object:
    (tmp_path / "pw").write_text("s3cret\n")
    p = tmp_path / "config.toml"
    p.write_text(f'state_db = "{tmp_path / "state.db"}"\n[notify]\n[notify.email]\nhost = "127.0.0.1"\n'
                 f'port = {port}\nusername = "rebal"\npassword_file = "{tmp_path / "pw"}"\nfrom = "rebal@test"\n'
                 f'to = ["admin@test"]\n{extra}')
    return p


def test_an_impostors_certificate_gets_no_login(tmp_path, smtp_tls):
    """Attacker: a self-signed CN=evil.example in the middle. Before, STARTTLS took any certificate
    and the login went to it."""
    srv = smtp_tls(*_cert(tmp_path, "evil", "evil.example"))
    r = rebal("notify", "--test", config=_config(tmp_path, srv.port), check=False)
    assert r.returncode == 1 and "CERTIFICATE_VERIFY_FAILED" in r.stdout, (r.stdout, r.stderr)
    assert srv.logins == [] and srv.mail == []


def test_a_private_ca_is_trusted_when_named(tmp_path, smtp_tls):
    ca = _cert(tmp_path, "ca", "rebal test CA")
    srv = smtp_tls(*_cert(tmp_path, "mail", "mail.test", ca=ca))
    r = rebal("notify", "--test", config=_config(tmp_path, srv.port, f'ca_file = "{ca[1]}"\n'), check=False)
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert srv.logins == [(b"rebal", b"s3cret")] and len(srv.mail) == 1


def test_a_password_is_never_sent_in_clear_unless_the_config_says_so(tmp_path):
    r = rebal("config", "check", config=_config(tmp_path, 25, "starttls = false\n"), check=False)
    assert r.returncode != 0 and "in clear" in r.stderr + r.stdout, (r.stdout, r.stderr)
