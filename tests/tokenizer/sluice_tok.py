"""ctypes wrapper over tests/capi/capi_tokenizer.cpp."""
from __future__ import annotations

import ctypes
import json

_ERR = 4096


class SluiceTokenizer:
    def __init__(self, lib: ctypes.CDLL, handle: ctypes.c_void_p):
        self.lib, self.h = lib, handle
        for name, res in [("sluice_tok_encode", ctypes.c_int), ("sluice_tok_decode", ctypes.c_int),
                          ("sluice_tok_stream", ctypes.c_int), ("sluice_tok_info", ctypes.c_int),
                          ("sluice_tok_is_eog", ctypes.c_int), ("sluice_tok_find_special", ctypes.c_int32)]:
            getattr(lib, name).restype = res
        lib.sluice_tok_free.argtypes = [ctypes.c_void_p]
        lib.sluice_tok_is_eog.argtypes = [ctypes.c_void_p, ctypes.c_int32]
        lib.sluice_tok_find_special.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        n, bos, eos, eot, add_bos = (ctypes.c_int32() for _ in range(5))
        lib.sluice_tok_info(self.h, ctypes.byref(n), ctypes.byref(bos), ctypes.byref(eos), ctypes.byref(eot),
                            ctypes.byref(add_bos))
        self.n_vocab, self.bos, self.eos, self.eot, self.add_bos = n.value, bos.value, eos.value, eot.value, bool(add_bos.value)

    @staticmethod
    def _open(lib, fn, arg: bytes) -> "SluiceTokenizer":
        h = ctypes.c_void_p()
        err = ctypes.create_string_buffer(_ERR)
        rc = getattr(lib, fn)(arg, ctypes.byref(h), err, ctypes.c_size_t(_ERR))
        if rc != 0:
            raise ValueError(err.value.decode(errors="replace"))
        return SluiceTokenizer(lib, h)

    @classmethod
    def from_meta(cls, lib, meta: dict) -> "SluiceTokenizer":
        return cls._open(lib, "sluice_tok_from_meta_json", json.dumps(meta).encode())

    @classmethod
    def from_hf_dir(cls, lib, path) -> "SluiceTokenizer":
        return cls._open(lib, "sluice_tok_from_hf_dir", str(path).encode())

    @classmethod
    def for_model(cls, lib, path) -> "SluiceTokenizer":
        return cls._open(lib, "sluice_tok_for_model", str(path).encode())

    def close(self):
        if self.h:
            self.lib.sluice_tok_free(self.h)
            self.h = None

    def encode(self, text: str | bytes, parse_special: bool = True, add_bos: bool = False) -> list[int]:
        data = text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text
        cap = len(data) + 8
        out = (ctypes.c_int32 * cap)()
        n = ctypes.c_size_t()
        err = ctypes.create_string_buffer(_ERR)
        rc = self.lib.sluice_tok_encode(self.h, data, ctypes.c_size_t(len(data)), int(parse_special), int(add_bos),
                                        out, ctypes.c_size_t(cap), ctypes.byref(n), err, ctypes.c_size_t(_ERR))
        if rc != 0:
            raise ValueError(err.value.decode(errors="replace"))
        return list(out[:n.value])

    def _bytes_call(self, fn, ids, *extra):
        arr = (ctypes.c_int32 * max(1, len(ids)))(*ids)
        cap = 64 + 64 * len(ids)
        buf = ctypes.create_string_buffer(cap)
        n = ctypes.c_size_t()
        err = ctypes.create_string_buffer(_ERR)
        rc = getattr(self.lib, fn)(self.h, arr, ctypes.c_size_t(len(ids)), buf, ctypes.c_size_t(cap), ctypes.byref(n),
                                   *extra, err, ctypes.c_size_t(_ERR))
        if rc != 0:
            raise ValueError(err.value.decode(errors="replace"))
        return buf.raw[:n.value]

    def decode(self, ids: list[int]) -> bytes:
        return self._bytes_call("sluice_tok_decode", ids)

    def stream(self, ids: list[int]) -> list[bytes]:
        """The pieces stream_decoder emits: one per id, then flush()'s."""
        ends = (ctypes.c_size_t * (len(ids) + 1))()
        all_bytes = self._bytes_call("sluice_tok_stream", ids, ends)
        pieces, start = [], 0
        for e in ends:
            pieces.append(all_bytes[start:e])
            start = e
        return pieces

    def is_eog(self, token: int) -> bool:
        return bool(self.lib.sluice_tok_is_eog(self.h, token))

    def find_special(self, text: str) -> int:
        return self.lib.sluice_tok_find_special(self.h, text.encode())
