"""Fixtures for the end-to-end server tests: `sluice serve` with the default model on a free
loopback port, ready when /ready answers 200, stopped with SIGTERM (which must exit 0).

Every test here talks to the server over 127.0.0.1 only; logs and artefacts (the server's log,
screenshots) go to $SLUICE_BINARY_DIR/test-output/ so a failed CI run can be read afterwards.
"""
import http.client
import json
import os
import pathlib
import shlex
import signal
import socket
import subprocess
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

# Generous: loading SmolLM2-135M takes ~1 s, but CI's two cores may be busy with other tests.
READY_TIMEOUT_S = 120
STOP_TIMEOUT_S = 60


def output_dir() -> pathlib.Path:
    base = pathlib.Path(os.environ.get("SLUICE_BINARY_DIR", ROOT / "build" / "release"))
    path = base / "test-output"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A running `sluice serve`: its address, its process and small HTTP helpers (stdlib only)."""

    def __init__(self, proc: subprocess.Popen, port: int, log_path: pathlib.Path):
        self.proc = proc
        self.port = port
        self.host = "127.0.0.1"
        self.base_url = f"http://{self.host}:{port}"
        self.log_path = log_path

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def request(self, method: str, path: str, body=None, headers=None, timeout: float = 120):
        """Returns (status, headers as a dict with lower-case names, body bytes)."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            data = None
            hdrs = dict(headers or {})
            if body is not None:
                data = body if isinstance(body, (bytes, str)) else json.dumps(body)
                hdrs.setdefault("Content-Type", "application/json")
            conn.request(method, path, body=data, headers=hdrs)
            res = conn.getresponse()
            payload = res.read()
            return res.status, {k.lower(): v for k, v in res.getheaders()}, payload
        finally:
            conn.close()

    def get(self, path: str, **kw):
        return self.request("GET", path, **kw)

    def post_json(self, path: str, body, **kw):
        """POSTs a JSON body; returns (status, parsed JSON reply or None when not JSON)."""
        status, _, payload = self.request("POST", path, body=body, **kw)
        try:
            return status, json.loads(payload)
        except ValueError:
            return status, None

    def model_id(self) -> str:
        status, _, payload = self.get("/v1/models")
        assert status == 200, payload
        return json.loads(payload)["data"][0]["id"]

    def rss_kib(self) -> int:
        """Resident set size of the server process (VmRSS in /proc/PID/status), in KiB."""
        for line in pathlib.Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS line in /proc/PID/status")

    def stop(self) -> int:
        """SIGTERM, then the exit status (a server that ignores SIGTERM is killed and fails)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(f"sluice serve did not exit within {STOP_TIMEOUT_S} s of SIGTERM")
        return self.proc.returncode


def start_server(sluice_bin: pathlib.Path, *args: str, name: str = "server") -> Server:
    """Starts `sluice serve [args]` on a free port and waits until /ready answers 200.

    The model is the default one (`sluice serve` with no MODEL argument finds it the way
    `sluice run` does) unless args name one. A port taken between our probe and the server's
    bind makes the server exit: that is retried with another port.
    """
    log_path = output_dir() / f"{name}.log"
    last_error = ""
    for _attempt in range(3):
        port = _free_port()
        cmd = [str(sluice_bin), "serve", *args, "--host", "127.0.0.1", "--port", str(port), "-t", "2"]
        log = open(log_path, "wb")
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        log.close()
        server = Server(proc, port, log_path)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            try:
                status, _, _ = server.get("/ready", timeout=5)
                if status == 200:
                    return server
            except OSError:
                pass
            time.sleep(0.2)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
            pytest.fail(f"sluice serve not ready within {READY_TIMEOUT_S} s: {' '.join(cmd)}\n{server.log_tail()}")
        last_error = f"exit {proc.returncode}: {' '.join(cmd)}\n{server.log_tail()}"
        if "bind" not in last_error.lower() and "address" not in last_error.lower():
            break
    pytest.fail(f"sluice serve exited before it was ready: {last_error}")


@pytest.fixture(scope="session")
def e2e_output_dir() -> pathlib.Path:
    return output_dir()


def check_generates(server: Server) -> None:
    """One two-token completion within 60 s, so that a server that is ready but cannot decode
    fails here once, not in every test after a long client timeout."""
    try:
        status, body = server.post_json("/v1/completions", {"prompt": "Hello", "max_tokens": 2, "temperature": 0},
                                        timeout=60)
    except OSError as e:
        status, body = None, repr(e)
    if status != 200:
        server.proc.kill()
        server.proc.wait()
        pytest.fail(f"sluice serve is ready but a 2-token completion failed: {status} {body}\n{server.log_tail()}")


@pytest.fixture(scope="session")
def sluice_server(sluice_bin):
    """One server for the end-to-end tests of a session; its SIGTERM exit status is checked.
    $SLUICE_E2E_SERVE_ARGS adds flags (e.g. "--spec", or a MODEL path) to run the same suite
    against another configuration."""
    extra = shlex.split(os.environ.get("SLUICE_E2E_SERVE_ARGS", ""))
    server = start_server(sluice_bin, *extra, name="e2e_server")
    check_generates(server)
    yield server
    rc = server.stop()
    assert rc == 0, f"sluice serve exited {rc} after SIGTERM\n{server.log_tail()}"
