"""ctypes wrapper over tests/capi/capi_hf.cpp: a Hugging Face directory as sluice sees it."""
import ctypes

import numpy as np

# GGML type ids (src/core/dtype.h) for the element types a safetensors file can hold.
GGML_F32, GGML_F16, GGML_BF16 = 0, 1, 30
META_U32, META_F32, META_BOOL, META_STRING, META_ARRAY = 4, 6, 7, 8, 9


def _bind(lib):
    if getattr(lib, "_hf_bound", False):
        return lib
    c = ctypes
    lib.sluice_hf_open.argtypes = [c.c_char_p, c.c_int, c.POINTER(c.c_void_p), c.c_char_p, c.c_size_t]
    lib.sluice_hf_close.argtypes = [c.c_void_p]
    lib.sluice_hf_tensor_count.argtypes = [c.c_void_p]
    lib.sluice_hf_tensor_count.restype = c.c_int64
    lib.sluice_hf_tensor.argtypes = [c.c_void_p, c.c_int64, c.POINTER(c.c_char_p),
                                     c.POINTER(c.c_uint32), c.POINTER(c.c_int32),
                                     c.POINTER(c.c_int64), c.POINTER(c.c_void_p),
                                     c.POINTER(c.c_uint64)]
    lib.sluice_hf_format.argtypes = [c.c_void_p]
    lib.sluice_hf_format.restype = c.c_char_p
    lib.sluice_hf_meta_type.argtypes = [c.c_void_p, c.c_char_p]
    lib.sluice_hf_meta_int.argtypes = [c.c_void_p, c.c_char_p, c.POINTER(c.c_int64)]
    lib.sluice_hf_meta_float.argtypes = [c.c_void_p, c.c_char_p, c.POINTER(c.c_double)]
    lib.sluice_hf_meta_bool.argtypes = [c.c_void_p, c.c_char_p, c.POINTER(c.c_int)]
    lib.sluice_hf_meta_string.argtypes = [c.c_void_p, c.c_char_p, c.c_char_p, c.c_size_t]
    lib.sluice_hf_meta_int_array.argtypes = [c.c_void_p, c.c_char_p, c.POINTER(c.c_int),
                                             c.POINTER(c.c_int64), c.c_int64]
    lib.sluice_hf_meta_int_array.restype = c.c_int64
    lib.sluice_st_parse.argtypes = [c.c_char_p, c.c_size_t, c.c_char_p, c.c_size_t]
    lib.sluice_st_parse.restype = c.c_int64
    lib._hf_bound = True
    return lib


class HfError(Exception):
    pass


class Tensor:
    def __init__(self, name, ggml_type, ne, raw):
        self.name, self.type, self.ne, self.raw = name, ggml_type, ne, raw

    def array(self):
        """float32 / float16 values in numpy's (outermost first) order; BF16 as uint16 bits."""
        dt = {GGML_F32: np.float32, GGML_F16: np.float16, GGML_BF16: np.uint16}[self.type]
        return np.frombuffer(self.raw, dtype=dt).reshape(tuple(reversed(self.ne)))


class HfModel:
    def __init__(self, capi, path, via_model_file=False):
        self.lib = _bind(capi)
        err = ctypes.create_string_buffer(4096)
        h = ctypes.c_void_p()
        rc = self.lib.sluice_hf_open(str(path).encode(), int(via_model_file), ctypes.byref(h), err, 4096)
        if rc != 0:
            raise HfError(err.value.decode())
        self.h = h
        self.format = self.lib.sluice_hf_format(h).decode()
        self.tensors = {}
        self.order = []
        for i in range(self.lib.sluice_hf_tensor_count(h)):
            name, typ, nd = ctypes.c_char_p(), ctypes.c_uint32(), ctypes.c_int32()
            ne, data, nbytes = (ctypes.c_int64 * 4)(), ctypes.c_void_p(), ctypes.c_uint64()
            assert self.lib.sluice_hf_tensor(h, i, ctypes.byref(name), ctypes.byref(typ), ctypes.byref(nd),
                                             ne, ctypes.byref(data), ctypes.byref(nbytes)) == 0
            raw = ctypes.string_at(data.value, nbytes.value) if nbytes.value else b""
            t = Tensor(name.value.decode(), typ.value, list(ne)[: nd.value], raw)
            self.tensors[t.name] = t
            self.order.append(t.name)

    def close(self):
        if self.h:
            self.lib.sluice_hf_close(self.h)
            self.h = None

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    def meta_type(self, key):
        return self.lib.sluice_hf_meta_type(self.h, key.encode())

    def meta(self, key):
        """The value under key, typed by its GGUF type; None when absent."""
        t = self.meta_type(key)
        k = key.encode()
        if t == -2:
            return None
        if t == META_STRING:
            buf = ctypes.create_string_buffer(1 << 16)
            self.lib.sluice_hf_meta_string(self.h, k, buf, len(buf))
            return buf.value.decode()
        if t == META_BOOL:
            v = ctypes.c_int()
            self.lib.sluice_hf_meta_bool(self.h, k, ctypes.byref(v))
            return bool(v.value)
        if t == META_ARRAY:  # integer and bool arrays (the hybrids' recurrent_layers, mrope sections)
            elem, cap = ctypes.c_int(), 4096
            buf = (ctypes.c_int64 * cap)()
            n = self.lib.sluice_hf_meta_int_array(self.h, k, ctypes.byref(elem), buf, cap)
            assert 0 <= n <= cap, key
            return [bool(x) for x in buf[:n]] if elem.value == META_BOOL else list(buf[:n])
        if t in (META_F32, 12):
            v = ctypes.c_double()
            self.lib.sluice_hf_meta_float(self.h, k, ctypes.byref(v))
            return v.value
        v = ctypes.c_int64()
        assert self.lib.sluice_hf_meta_int(self.h, k, ctypes.byref(v)) == 0, key
        return v.value


def parse_bytes(capi, data: bytes):
    """Tensor count of a safetensors image, or raises HfError with the reader's message."""
    lib = _bind(capi)
    err = ctypes.create_string_buffer(4096)
    n = lib.sluice_st_parse(data, len(data), err, 4096)
    if n < 0:
        raise HfError(err.value.decode())
    return n
