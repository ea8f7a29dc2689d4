"""Tensor checks of guards in C++: one call per tensor, built once per machine in the background.

Note [Guards: tensor checks in C++]
A guard checks every tensor it reads (inputs, parameters, buffers) for its type, dtype, sizes,
strides, requires_grad (and being a leaf, when it requires grad), device and dispatch keys.
Written in Python that is six or seven
conditions, ~0.6 us per parameter and ~1.1 us per input (the dispatch-key read alone ~0.5 us):
most of a cache hit's host cost on models with hundreds of parameters. `TensorMatch(example,
check_keys)` of the extension `kiln_tensor_match` copies those facts from the example tensor once;
calling it on a tensor compares them with the tensor's own in C++ (~60 ns, no Python objects made).
The guard's readable parts (the recompile reason, `first_failure`) stay the Python expressions;
only the check function calls the C++ object.

It is used for tensors whose type is exactly torch.Tensor or nn.Parameter with strided layout
(a subclass may override `.shape` or `__torch_function__`, which the C++ read would skip). A
tensor with symbolic sizes is matched on its rank, its static sizes and contiguity when its
layout guard is "contiguous" (the SHAPE_ENV guard checks the symbolic sizes); when its strides
are expressions of its sizes, it keeps its Python checks. The module needs
PyTorch's C++ headers: built with them it takes ~30 s of one core, so it is built once per
machine and PyTorch version in a background thread at the first guard, kept in the cache
folder, and loaded by later processes at once. Guards made before it is loaded keep their Python
checks; with config.cpp_guards off, or where it cannot be built (no compiler, no headers), all
guards are Python, with the same meaning.
"""

import functools
import os
import sysconfig
import threading

import torch

from kiln import config, toolchain

SOURCE = r"""// kiln_tensor_match: Note [Guards: tensor checks in C++] in kiln/frontend/tensor_match.py
// built against torch @TORCH@
#include <Python.h>
#include <torch/csrc/autograd/python_variable.h>
#include <cstdint>
#include <cstddef>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

struct Facts {
    int8_t dtype;
    int8_t device_type;
    int16_t device_index;
    bool requires_grad;
    bool leaf;  // (checked for a tensor that requires grad: Note [Tensors: non-leaf inputs])
    bool check_keys;
    bool contiguous;  // symbolic sizes: the layout is "contiguous", not the strides
    uint64_t keys;
    std::vector<int64_t> sizes;  // -1: a symbolic size (the guard's shape facts check it)
    std::vector<int64_t> strides;
};

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject* type;  // the exact Python type the tensor must have (a strong reference)
    PyObject* text;  // what it checks, for the printed guard
    Facts* facts;
} TensorMatch;

static bool matches(const TensorMatch* m, PyObject* obj) {
    if ((PyObject*)Py_TYPE(obj) != m->type) return false;
    const Facts& f = *m->facts;
    try {
        const at::Tensor& t = THPVariable_Unpack(obj);
        if ((int8_t)t.scalar_type() != f.dtype) return false;
        if (t.layout() != c10::kStrided || t.is_nested()) return false;
        c10::Device d = t.device();
        if ((int8_t)d.type() != f.device_type || (int16_t)d.index() != f.device_index) return false;
        if (t.requires_grad() != f.requires_grad) return false;
        if (f.requires_grad && t.is_leaf() != f.leaf) return false;
        c10::IntArrayRef sizes = t.sizes();
        size_t n = f.sizes.size();
        if (sizes.size() != n) return false;
        if (f.contiguous) {
            for (size_t i = 0; i < n; i++) {
                if (f.sizes[i] >= 0 && sizes[i] != f.sizes[i]) return false;
            }
            if (!t.is_contiguous()) return false;
        } else {
            c10::IntArrayRef strides = t.strides();
            for (size_t i = 0; i < n; i++) {
                if (sizes[i] != f.sizes[i] || strides[i] != f.strides[i]) return false;
            }
        }
        if (f.check_keys && t.key_set().raw_repr() != f.keys) return false;
        return true;
    } catch (...) {  // a tensor whose facts cannot be read fails, as a raising guard does
        return false;
    }
}

static PyObject* tm_vectorcall(PyObject* self, PyObject* const* a, size_t nargsf,
                               PyObject* kwnames) {
    if (kwnames != NULL || PyVectorcall_NARGS(nargsf) != 1) {
        PyErr_SetString(PyExc_TypeError, "a TensorMatch takes one tensor");
        return NULL;
    }
    if (matches((TensorMatch*)self, a[0])) Py_RETURN_TRUE;
    Py_RETURN_FALSE;
}

static PyObject* tm_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
    PyObject* example;
    int check_keys;
    PyObject* text;
    PyObject* symbolic = NULL;  // the dims whose sizes are symbolic (a tuple), or absent
    if (!PyArg_ParseTuple(args, "OpU|O!", &example, &check_keys, &text, &PyTuple_Type, &symbolic))
        return NULL;
    if (!THPVariable_Check(example)) {
        PyErr_SetString(PyExc_TypeError, "TensorMatch needs a tensor");
        return NULL;
    }
    Facts* f = new (std::nothrow) Facts();
    if (f == NULL) return PyErr_NoMemory();
    try {
        const at::Tensor& t = THPVariable_Unpack(example);
        if (t.layout() != c10::kStrided || t.is_nested()) throw std::runtime_error("not strided");
        f->dtype = (int8_t)t.scalar_type();
        f->device_type = (int8_t)t.device().type();
        f->device_index = (int16_t)t.device().index();
        f->requires_grad = t.requires_grad();
        f->leaf = t.is_leaf();
        f->check_keys = check_keys != 0;
        f->keys = t.key_set().raw_repr();
        f->sizes = t.sizes().vec();
        f->strides = t.strides().vec();
        f->contiguous = symbolic != NULL;
        if (symbolic != NULL) {
            for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(symbolic); i++) {
                long d = PyLong_AsLong(PyTuple_GET_ITEM(symbolic, i));
                if (d < 0 || d >= (long)f->sizes.size()) throw std::runtime_error("bad dim");
                f->sizes[d] = -1;
            }
        }
    } catch (const std::exception& e) {
        delete f;
        PyErr_SetString(PyExc_ValueError, e.what());
        return NULL;
    }
    TensorMatch* m = (TensorMatch*)type->tp_alloc(type, 0);
    if (m == NULL) {
        delete f;
        return NULL;
    }
    m->vectorcall = tm_vectorcall;
    m->type = (PyObject*)Py_TYPE(example);
    Py_INCREF(m->type);
    m->text = text;
    Py_INCREF(text);
    m->facts = f;
    return (PyObject*)m;
}

static void tm_dealloc(PyObject* self) {
    TensorMatch* m = (TensorMatch*)self;
    Py_XDECREF(m->type);
    Py_XDECREF(m->text);
    delete m->facts;
    Py_TYPE(self)->tp_free(self);
}

static PyObject* tm_repr(PyObject* self) {
    PyObject* text = ((TensorMatch*)self)->text;
    Py_INCREF(text);
    return text;
}

static PyObject* tensor_keys(PyObject* self, PyObject* arg) {
    if (!THPVariable_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "tensor_keys needs a tensor");
        return NULL;
    }
    return PyLong_FromUnsignedLongLong(THPVariable_Unpack(arg).key_set().raw_repr());
}

static PyTypeObject TensorMatchType = {PyVarObject_HEAD_INIT(NULL, 0)};
static PyMethodDef methods[] = {
    {"tensor_keys", tensor_keys, METH_O, "The raw dispatch key set of a tensor."},
    {NULL, NULL, 0, NULL}};
static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT};

extern "C" PyMODINIT_FUNC PyInit_kiln_tensor_match(void) {
    TensorMatchType.tp_name = "kiln_tensor_match.TensorMatch";
    TensorMatchType.tp_doc = "The facts a guard checks of one tensor, compared in C++.";
    TensorMatchType.tp_basicsize = sizeof(TensorMatch);
    TensorMatchType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL;
    TensorMatchType.tp_vectorcall_offset = offsetof(TensorMatch, vectorcall);
    TensorMatchType.tp_call = PyVectorcall_Call;
    TensorMatchType.tp_new = tm_new;
    TensorMatchType.tp_dealloc = tm_dealloc;
    TensorMatchType.tp_repr = tm_repr;
    if (PyType_Ready(&TensorMatchType) < 0) return NULL;
    module_def.m_name = "kiln_tensor_match";
    module_def.m_size = -1;
    module_def.m_methods = methods;
    PyObject* m = PyModule_Create(&module_def);
    if (m == NULL) return NULL;
    Py_INCREF(&TensorMatchType);
    if (PyModule_AddObject(m, "TensorMatch", (PyObject*)&TensorMatchType) < 0) return NULL;
    return m;
}
"""

_CHECKED_TYPES = (torch.Tensor, torch.nn.Parameter)  # exact types whose facts C++ reads as Python
_lock = threading.Lock()
_state = {"module": None, "thread": None, "failed": None}


def _flags():
    """Compiler flags for a module that includes PyTorch's C++ headers."""
    py_include = sysconfig.get_paths().get("include") or ""
    if not os.path.exists(os.path.join(py_include, "Python.h")):
        raise toolchain.CompilerError(f"Python.h not found in {py_include!r}")
    root = os.path.dirname(torch.__file__)
    include = os.path.join(root, "include")
    if not os.path.exists(os.path.join(include, "torch", "csrc", "autograd")):
        raise toolchain.CompilerError(f"PyTorch's C++ headers not found in {include!r}")
    lib = os.path.join(root, "lib")
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    return [
        f"-I{py_include}",
        f"-I{include}",
        f"-I{os.path.join(include, 'torch', 'csrc', 'api', 'include')}",
        f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
        "-w",  # (PyTorch's headers warn under the kernels' C++ standard)
        f"-L{lib}",
        f"-Wl,-rpath,{lib}",
    ]


_LIBRARIES = ("-ltorch_python", "-ltorch_cpu", "-lc10")  # (after the source: --as-needed)


@functools.lru_cache(None)
def _source():
    return SOURCE.replace("@TORCH@", torch.__version__)


def module(wait=False):
    """The loaded extension, or None while it is being built (or cannot be); the first call
    starts the build in a background thread, or loads a build already on disk at once."""
    if not config.cpp_guards:
        return None
    return toolchain.background_extension(
        _state,
        _lock,
        "kiln_tensor_match",
        _source(),
        _flags,
        "tensor_match",
        _LIBRARIES,
        wait=wait,
    )


def matcher(t, check_keys, symbolic=None):
    """A C++ check of tensor `t`'s facts, or None where the Python conditions must serve;
    `symbolic`: the dims whose sizes are symbolic, for a tensor checked as contiguous."""
    if type(t) not in _CHECKED_TYPES or t.layout != torch.strided or t.is_nested:
        return None
    m = module()
    if m is None:
        return None
    text = describe(t, check_keys, symbolic)
    try:
        if symbolic is None:
            return m.TensorMatch(t, check_keys, text)
        return m.TensorMatch(t, check_keys, text, tuple(symbolic))
    except (TypeError, ValueError):
        return None


def describe(t, check_keys, symbolic=None):
    """The facts a TensorMatch of `t` checks, as text."""
    keys = " and dispatch keys" if check_keys else ""
    leaf = " non-leaf" if t.requires_grad and not t.is_leaf else ""
    if symbolic is None:
        layout = f"size={tuple(t.shape)} stride={t.stride()}"
    else:
        sizes = ", ".join("*" if d in symbolic else str(n) for d, n in enumerate(t.shape))
        layout = f"size=({sizes}{',' if t.dim() == 1 else ''}) contiguous"
    return (
        f"TensorMatch({type(t).__name__} {str(t.dtype).removeprefix('torch.')} {t.device} "
        f"{layout} requires_grad={t.requires_grad}{leaf}{keys})"
    )
