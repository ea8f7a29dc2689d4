"""A fast way to call C++ kernels from the wrapper: one small Python extension, built once.

Note [C++: calling kernels]
The wrapper calls each kernel once per graph run with the addresses of its buffers (ints from
`data_ptr()`) and its size arguments. Through ctypes such a call costs about 2 us: `argtypes`
converts each argument, and a foreign-call frame is built. `kiln_fastcall.Kernel(address)` is a
callable object of our own extension module (vectorcall, no keyword arguments): it converts each
int to a machine word and calls the kernel through a function pointer of that many word
arguments, with the GIL released as ctypes does; about 1 us. Every kernel parameter is a pointer
or an int64_t, both passed as one integer register or stack word by the C calling conventions
of the platforms kiln builds on, so one signature of N words serves every kernel of N
parameters. The module does not depend on the graph: it is compiled once per Python (the cache
key is its source, the compiler and Python's include folder) next to the kernels' cache, and
where Python.h or the compiler is missing, or with config.fast_kernel_calls off, kernels are
called through ctypes as before.
"""

import functools
import importlib.machinery
import importlib.util
import os
import sysconfig

from kiln import config, logs
from kiln.backend import codecache

MAX_ARGS = 64  # kernel parameters a Kernel object calls with (more: ctypes)


def _source():
    cases = []
    for n in range(MAX_ARGS + 1):
        params = ", ".join(["W"] * n)
        args = ", ".join(f"v[{i}]" for i in range(n))
        cases.append(f"    case {n}: r = ((int (*)({params}))fn)({args}); break;")
    switch = "\n".join(cases)
    return f"""// kiln_fastcall: Note [C++: calling kernels] in kiln/backend/fastcall.py
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>

typedef intptr_t W;

typedef struct {{
    PyObject_HEAD
    void* fn;
    vectorcallfunc vectorcall;
}} Kernel;

static int call_words(void* fn, Py_ssize_t n, const W* v) {{
    int r = -1;
    switch (n) {{
{switch}
    }}
    return r;
}}

static PyObject* kernel_vectorcall(PyObject* self, PyObject* const* a, size_t nargsf,
                                   PyObject* kwnames) {{
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (kwnames != NULL || n > {MAX_ARGS}) {{
        PyErr_SetString(PyExc_TypeError, "a kiln kernel takes at most {MAX_ARGS} ints");
        return NULL;
    }}
    W v[{MAX_ARGS} + 1];
    for (Py_ssize_t i = 0; i < n; i++) v[i] = (W)PyLong_AsLongLong(a[i]);
    if (PyErr_Occurred()) return NULL;
    void* fn = ((Kernel*)self)->fn;
    int r;
    Py_BEGIN_ALLOW_THREADS
    r = call_words(fn, n, v);
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(r);
}}

static PyObject* kernel_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {{
    unsigned long long address;
    if (!PyArg_ParseTuple(args, "K", &address)) return NULL;
    Kernel* k = (Kernel*)type->tp_alloc(type, 0);
    if (k == NULL) return NULL;
    k->fn = (void*)(uintptr_t)address;
    k->vectorcall = kernel_vectorcall;
    return (PyObject*)k;
}}

static PyTypeObject KernelType = {{PyVarObject_HEAD_INIT(NULL, 0)}};
static struct PyModuleDef module_def = {{PyModuleDef_HEAD_INIT}};

extern "C" PyMODINIT_FUNC PyInit_kiln_fastcall(void) {{
    KernelType.tp_name = "kiln_fastcall.Kernel";
    KernelType.tp_doc = "A C++ kernel called with int arguments (addresses and sizes).";
    KernelType.tp_basicsize = sizeof(Kernel);
    KernelType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL;
    KernelType.tp_vectorcall_offset = offsetof(Kernel, vectorcall);
    KernelType.tp_call = PyVectorcall_Call;
    KernelType.tp_new = kernel_new;
    if (PyType_Ready(&KernelType) < 0) return NULL;
    module_def.m_name = "kiln_fastcall";
    module_def.m_size = -1;
    PyObject* m = PyModule_Create(&module_def);
    if (m == NULL) return NULL;
    Py_INCREF(&KernelType);
    if (PyModule_AddObject(m, "Kernel", (PyObject*)&KernelType) < 0) return NULL;
    return m;
}}
"""


def _include():
    path = sysconfig.get_paths().get("include") or ""
    return path if os.path.exists(os.path.join(path, "Python.h")) else ""


@functools.lru_cache(None)
def _build(compiler, include):
    """The built module, or None (logged) when it cannot be built here."""
    try:
        so = codecache.compile_cpp(_source(), [f"-I{include}"], kind="fastcall")
    except codecache.CompilerError as e:
        logs.log("output_code", "kiln_fastcall not built (%s): kernels through ctypes", e)
        return None
    loader = importlib.machinery.ExtensionFileLoader("kiln_fastcall", so)
    spec = importlib.util.spec_from_file_location("kiln_fastcall", so, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def module():
    """The kiln_fastcall module, or None where kernels are called through ctypes."""
    if not config.fast_kernel_calls:
        return None
    include = _include()
    if not include:
        return None
    return _build(config.cpp_compiler, include)
