"""The deploy nginx, run for real: deploy/nginx/feedpub.conf.template rendered as the nginx
image renders it (envsubst of the compose file's variables), with what deploy/nginx/tls.sh
writes beside it (its https listener and trusted proxies, as the image runs it), included by
the deploy's own nginx.conf (its paths moved into a work directory), in front of any HTTP
server (the live server, or a stub).

Without nginx these tests skip; with FEEDPUB_REQUIRE_NGINX set (.ci/run sets it) they fail
instead, so that CI never passes without having run them.
"""

from __future__ import annotations

import grp
import http.client
import itertools
import os
import pwd
import re
import resource
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from .external import require

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "deploy" / "nginx" / "feedpub.conf.template"
TLS_SCRIPT = ROOT / "deploy" / "nginx" / "tls.sh"
MAIN_CONFIG = ROOT / "deploy" / "nginx" / "nginx.conf"
VARIABLES = ("NGINX_PORT", "FEEDPUB_UPSTREAM", "FEEDPUB_LONGPOLL_UPSTREAM", "NGINX_CACHE_DIR",
             "NGINX_CACHE_SIZE", "FEEDPUB_PAGES_DIR", "FEEDPUB_BASE_URL", "FEEDPUB_MAX_AGE",
             "FEEDPUB_SECURE_SSL_REDIRECT", "FEEDPUB_SECURE_HSTS_SECONDS",
             "FEEDPUB_SECURE_HSTS_INCLUDE_SUBDOMAINS", "FEEDPUB_SECURE_HSTS_PRELOAD",
             "NGINX_RESOLVER", "NGINX_ACME_ROOT")
# What deploy/nginx/tls.sh reads (docker-compose.yml gives nginx these too).
TLS_VARIABLES = ("FEEDPUB_TLS_CERT", "FEEDPUB_TLS_KEY", "NGINX_TLS_PORT",
                 "FEEDPUB_TRUSTED_PROXIES", "FEEDPUB_TLS_CHECK_SECONDS")
# A header of every request of Nginx.request, which the test configuration alone logs (to
# done.log) once nginx is done with the request: see Nginx.request.
DONE_HEADER = "X-Nginx-Test-Request"


def nginx_binary() -> str | None:
    found = shutil.which("nginx")
    if found:
        return found
    return next((path for path in ("/usr/sbin/nginx", "/usr/local/sbin/nginx")
                 if os.access(path, os.X_OK)), None)


def require_nginx() -> str:
    """The nginx binary. Without one: skip, or fail when FEEDPUB_REQUIRE_NGINX is set."""
    return require(nginx_binary(), name="nginx", install="nginx-light")


def envsubst(text: str, values: dict[str, str]) -> str:
    """What `envsubst '$NAME ...'` does (the nginx image's 20-envsubst-on-templates.sh):
    `${NAME}` and `$NAME` of the given names are replaced, every other `$` is left alone."""
    names = "|".join(re.escape(name) for name in values)
    pattern = re.compile(rf"\$(?:\{{({names})\}}|({names})(?![A-Za-z0-9_]))")
    return pattern.sub(lambda match: values[match.group(1) or match.group(2)], text)


def render_template(values: dict[str, str]) -> str:
    assert set(values) == set(VARIABLES), "render with exactly the compose file's variables"
    return envsubst(TEMPLATE.read_text(), values)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def open_files() -> None:
    """In nginx's process, before it starts: the soft open-file limit raised up to the hard
    one (65,536 at most), as deploy/nginx/open-files.sh raises it in the container
    (without its refusal below worker_connections: a test holds far fewer connections)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 65536 if hard == resource.RLIM_INFINITY else min(65536, hard)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


def main_config(workdir: Path, include: Path) -> str:
    """The deploy's nginx.conf (deploy/nginx/nginx.conf), as run here: its paths in
    `workdir`, in the foreground, workers as the current user, and a second access log of
    the requests nginx is done with (Nginx.request). Every other line is the deploy's (its
    open files: `open_files`)."""
    user = "# (not root: nginx keeps its own user)"
    if os.geteuid() == 0:  # else nginx runs its workers as nobody, who cannot use workdir
        user = f"user {pwd.getpwuid(os.geteuid()).pw_name} {grp.getgrgid(os.getegid()).gr_name};"
    temp = workdir / "temp"
    done_variable = DONE_HEADER.lower().replace("-", "_")  # (only requests that carry it)
    text = MAIN_CONFIG.read_text()
    for old, new in (
        ("user  nginx;", f"{user}\ndaemon off;"),
        ("error_log  /var/log/nginx/error.log notice;", f"error_log {workdir}/error.log info;"),
        ("pid        /var/run/nginx.pid;", f"pid {workdir}/nginx.pid;"),
        ("access_log  /var/log/nginx/access.log  main;",
         f"access_log {workdir}/access.log main;\n"
         f"    log_format feedpub_test_done '$http_{done_variable}';\n"
         f"    access_log {workdir}/done.log feedpub_test_done if=$http_{done_variable};\n"
         f"    client_body_temp_path {temp}/body;\n    proxy_temp_path {temp}/proxy;\n"
         f"    fastcgi_temp_path {temp}/fastcgi;\n    uwsgi_temp_path {temp}/uwsgi;\n"
         f"    scgi_temp_path {temp}/scgi;"),
        ("include /etc/nginx/conf.d/*.conf;", f"include {include};"),
    ):
        assert text.count(old) == 1, f"deploy/nginx/nginx.conf no longer has {old!r}"
        text = text.replace(old, new)
    return text


@dataclass
class Response:
    status: int
    headers: http.client.HTTPMessage
    body: bytes

    def header(self, name: str) -> str | None:
        return self.headers.get(name)


@dataclass
class Nginx:
    """nginx with the deploy template in front of `upstream` (host:port)."""

    workdir: Path
    upstream: str
    edit: object = None  # a function applied to the rendered template (tests of options)
    port: int = field(default_factory=free_port)
    listen: str | None = None  # NGINX_PORT, if not 127.0.0.1:port
    pages_dir: Path | None = None  # FEEDPUB_PAGES_DIR (default: an empty one)
    base_url: str | None = None  # FEEDPUB_BASE_URL (default: nginx's own URL)
    max_age: int = 60  # FEEDPUB_MAX_AGE
    long_poll: str | None = None  # FEEDPUB_LONGPOLL_UPSTREAM, if not `upstream`
    # NGINX_RESOLVER: the DNS server for upstreams given by name (unused for addresses)
    resolver: str = "127.0.0.1 valid=10s ipv6=off"
    # FEEDPUB_SECURE_*: feedpub's SECURE_SSL_REDIRECT, SECURE_HSTS_SECONDS,
    # SECURE_HSTS_INCLUDE_SUBDOMAINS, SECURE_HSTS_PRELOAD (the test settings' by default)
    secure: dict[str, str] = field(default_factory=lambda: {
        "SSL_REDIRECT": "false", "HSTS_SECONDS": "0", "HSTS_INCLUDE_SUBDOMAINS": "false",
        "HSTS_PRELOAD": "false"})
    # FEEDPUB_TLS_CERT and FEEDPUB_TLS_KEY (deploy/nginx/tls.sh): https on `tls_port` too
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_port: int = field(default_factory=free_port)
    trusted_proxies: str = ""  # FEEDPUB_TRUSTED_PROXIES
    process: subprocess.Popen | None = None
    # DONE_HEADER's values (from 1: nginx's `if=` logs no "0")
    tokens: itertools.count = field(default_factory=lambda: itertools.count(1))

    @property
    def config(self) -> Path:
        return self.workdir / "nginx.conf"

    def write_config(self) -> None:
        (self.workdir / "temp").mkdir(parents=True, exist_ok=True)
        (self.workdir / "cache").mkdir(exist_ok=True)
        text = render_template({
            "NGINX_PORT": self.listen or f"127.0.0.1:{self.port}",
            "FEEDPUB_UPSTREAM": self.upstream,
            "FEEDPUB_LONGPOLL_UPSTREAM": self.long_poll or self.upstream,
            "NGINX_CACHE_DIR": str(self.workdir / "cache"),
            "NGINX_CACHE_SIZE": "64m",
            "FEEDPUB_PAGES_DIR": str(self.pages_dir or self.workdir / "pages"),
            "FEEDPUB_BASE_URL": self.base_url or self.url,
            "FEEDPUB_MAX_AGE": str(self.max_age),
            **{f"FEEDPUB_SECURE_{name}": value for name, value in self.secure.items()},
            "NGINX_RESOLVER": self.resolver,
            "NGINX_ACME_ROOT": str(self.acme_root),
        })
        if self.edit is not None:
            text = self.edit(text)
        (self.workdir / "feedpub.conf").write_text(text)
        self.config.write_text(main_config(self.workdir, self.workdir / "feedpub.conf"))
        self.tls_script("render")

    @property
    def acme_root(self) -> Path:
        return self.workdir / "acme"

    def tls_environment(self) -> dict[str, str]:
        """deploy/nginx/tls.sh's variables, as docker-compose.yml gives them (and where this
        nginx keeps its configuration and pid)."""
        return {"PATH": os.environ["PATH"], "NGINX_CONF_DIR": str(self.workdir),
                "NGINX_PID_FILE": str(self.workdir / "nginx.pid"),
                "FEEDPUB_TLS_CERT": str(self.tls_cert or ""),
                "FEEDPUB_TLS_KEY": str(self.tls_key or ""),
                "NGINX_TLS_PORT": f"127.0.0.1:{self.tls_port}",
                "FEEDPUB_TRUSTED_PROXIES": self.trusted_proxies}

    def tls_script(self, *arguments: str, **extra: str) -> str:
        """deploy/nginx/tls.sh run as the nginx image runs it, failing loudly; what it said.
        (Its stderr goes to a file, not a pipe: with no argument it leaves a watcher running
        that keeps it open.)"""
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = self.workdir / "tls.log"
        with log.open("w") as stderr:
            result = subprocess.run([str(TLS_SCRIPT), *arguments],  # noqa: S603
                                    env={**self.tls_environment(), **extra},
                                    stdout=subprocess.DEVNULL, stderr=stderr, check=False,
                                    timeout=30)
        said = log.read_text()
        if result.returncode != 0:
            raise RuntimeError(f"tls.sh {' '.join(arguments)} failed: {said}")
        return said

    def command(self, *extra: str) -> list[str]:
        return [require_nginx(), "-p", str(self.workdir), "-c", str(self.config),
                "-e", str(self.workdir / "error.log"), *extra]

    def test_config(self) -> subprocess.CompletedProcess:
        """`nginx -t` on the configuration."""
        self.write_config()
        return subprocess.run(self.command("-t"), capture_output=True, text=True,  # noqa: S603
                              check=False, timeout=30)

    def start(self) -> Nginx:
        self.write_config()
        self.process = subprocess.Popen(self.command(), stdout=subprocess.DEVNULL,  # noqa: S603
                                        stderr=subprocess.PIPE, preexec_fn=open_files)  # noqa: PLW1509
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"nginx exited: {self.process.stderr.read().decode()}\n"
                                   f"{self.error_log()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"nginx did not listen on {self.port}\n{self.error_log()}")

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()  # fast shutdown, workers too
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process.stderr.close()

    def error_log(self) -> str:
        path = self.workdir / "error.log"
        return path.read_text() if path.exists() else ""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def https_url(self) -> str:
        return f"https://localhost:{self.tls_port}"

    def request(self, path: str, headers: dict[str, str] | None = None,
                method: str = "GET") -> Response:
        """One request, on a connection of its own, answered once nginx is done with it.

        A client has the whole response before nginx has stored it in its cache: the
        worker that answered renames the cache file into place, then records it in the
        shared zone, after sending the last byte. Meanwhile the other worker may take the
        next request and answer it EXPIRED (the previous copy, being updated) or MISS (the
        new file, with a header longer than the zone says: "cache file has too long
        header"), never from the new copy. On a busy machine the first worker can wait
        that long for a CPU. nginx logs a request only once it is done with it (its copy
        stored), so this waits for that line, for this request's DONE_HEADER."""
        token = str(next(self.tokens))
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=15)
        try:
            connection.request(method, path, headers={**(headers or {}), DONE_HEADER: token})
            answer = connection.getresponse()
            response = Response(answer.status, answer.headers, answer.read())
        finally:
            connection.close()
        self.wait_until_done(token)
        return response

    def wait_until_done(self, token: str, timeout: float = 30) -> None:
        """Until nginx has logged the request that sent DONE_HEADER `token` (/nginx-health,
        whose log is off, never is)."""
        log = self.workdir / "done.log"
        deadline = time.monotonic() + timeout
        while not (log.exists() and token in log.read_text().split("\n")):
            if time.monotonic() > deadline:
                raise AssertionError(f"nginx did not finish request {token} within "
                                     f"{timeout} s\n{self.error_log()}")
            time.sleep(0.002)
