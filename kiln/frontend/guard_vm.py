"""The C interpreter of guard programs (`kiln_guard_vm`): built once per machine, loaded in the
background (Note [Guards: a program evaluated in C] in guard_program.py).

It needs only Python's headers (no PyTorch ones), so it builds in a few seconds; it uses the
public C API of CPython 3.11 to 3.13 (vectorcall, no private structs).
"""

import functools
import os
import sys
import sysconfig
import threading

from kiln import config, toolchain

# (the opcodes and comparison codes of the program; guard_program.py writes them in this order)
OPS = (
    "ATTR",  # dst = getattr(a, b)
    "PLAIN_ATTR",  # dst = object.__getattribute__(a, b)
    "CELL",  # dst = a.cell_contents (b: the name, for an object that is not a cell)
    "ITEM",  # dst = a[b]
    "CALL",  # dst = a(*extra[c:c+d])
    "TYPE",  # dst = type(a)
    "COMPARE",  # dst = a <c> b
    "BINARY",  # dst = a <c> b (arithmetic)
    "COPY",  # dst = a
    "JUMP_CMP",  # if bool(a <dst> b) == d: goto c
    "JUMP_TRUTH",  # if bool(a) == d: goto c
    "JUMP_TYPE",  # if (type(a) is b) == d: goto c
    "JUMP_LEN",  # if (len(a) == dst) == d: goto c
    "JUMP_KEYS",  # if (dst(a) == b) == d: goto c  (dst: the builtin list; b: a constant list)
    "JUMP",  # goto c
)
COMPARES = ("<", "<=", "==", "!=", ">", ">=", "is", "is not", "in", "not in")
BINARIES = ("+", "-", "*", "//", "%")

SOURCE = r"""// kiln_guard_vm: Note [Guards: a program evaluated in C] in kiln/frontend/guard_program.py
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

enum { OP_ATTR, OP_PLAIN_ATTR, OP_CELL, OP_ITEM, OP_CALL, OP_TYPE, OP_COMPARE, OP_BINARY,
       OP_COPY, OP_JUMP_CMP, OP_JUMP_TRUTH, OP_JUMP_TYPE, OP_JUMP_LEN, OP_JUMP_KEYS, OP_JUMP };
enum { CMP_IS = 6, CMP_IS_NOT = 7, CMP_IN = 8, CMP_NOT_IN = 9 };  // 0..5: Py_LT .. Py_GE
#define MAX_CALL_ARGS 16
#define STACK_SLOTS 128

typedef struct { int32_t op, dst, a, b, c, d; } Inst;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject* dict;        // attributes (source, parts, closure_values, ...)
    PyObject* weaklist;    // (weakly referenced, as a function is)
    PyObject* python;      // the Python guard function: same meaning, and the binder of last resort
    PyObject* consts;      // tuple: slots [0, nconsts)
    PyObject* names;       // tuple: the parameter names (slots [nconsts, nconsts + nparams))
    PyObject* defaults;    // tuple or NULL
    PyObject* kwdefaults;  // dict or NULL
    Inst* code;
    int32_t* extra;        // CALL arguments
    int ncode, nconsts, nparams, nslots;
    int argcount, posonly, kwonly, varargs, varkw, check;
} Program;

static int compare(int cmp, PyObject* x, PyObject* y) {
    if (cmp == CMP_IS) return x == y;
    if (cmp == CMP_IS_NOT) return x != y;
    if (cmp == CMP_IN || cmp == CMP_NOT_IN) {
        int t = PySequence_Contains(y, x);
        if (t < 0) return -1;
        return cmp == CMP_IN ? t : !t;
    }
    // (not PyObject_RichCompareBool: that takes identical objects as equal, NaN included)
    PyObject* r = PyObject_RichCompare(x, y, cmp);
    if (r == NULL) return -1;
    int t = PyObject_IsTrue(r);
    Py_DECREF(r);
    return t;
}

static PyObject* binary(int kind, PyObject* x, PyObject* y) {
    switch (kind) {
        case 0: return PyNumber_Add(x, y);
        case 1: return PyNumber_Subtract(x, y);
        case 2: return PyNumber_Multiply(x, y);
        case 3: return PyNumber_FloorDivide(x, y);
        case 4: return PyNumber_Remainder(x, y);
    }
    PyErr_SetString(PyExc_SystemError, "kiln_guard_vm: unknown binary operator");
    return NULL;
}

// list(d) == want for an exact dict d and an exact list want: 1 or 0 where no user code can run
// (keys identical, or both exact str or int), else -2 (the caller makes the list and compares)
static int dict_keys_equal(PyObject* d, PyObject* want) {
    Py_ssize_t n = PyList_GET_SIZE(want);
    if (PyDict_GET_SIZE(d) != n) return 0;
    Py_ssize_t pos = 0, i = 0;
    PyObject *k, *v;
    while (i < n && PyDict_Next(d, &pos, &k, &v)) {
        PyObject* e = PyList_GET_ITEM(want, i++);
        if (k == e) continue;
        if (PyUnicode_CheckExact(k) && PyUnicode_CheckExact(e)) {
            if (PyUnicode_Compare(k, e) != 0) return 0;
            continue;
        }
        if (PyLong_CheckExact(k) && PyLong_CheckExact(e)) {
            int t = PyObject_RichCompareBool(k, e, Py_EQ);
            if (t <= 0) return t;
            continue;
        }
        return -2;
    }
    return 1;
}

// 1: the guard holds, 0: it fails (a read that raised an Exception fails it), -1: an exception
// that is not an Exception (KeyboardInterrupt ...) propagates, as from the Python guard
static int run(const Program* p, PyObject** s) {
    const Inst* code = p->code;
    const int n = p->ncode;
    int pc = 0;
    while (pc < n) {
        const Inst* in = &code[pc++];
        PyObject* v = NULL;
        int t;
        switch (in->op) {
            case OP_ATTR:
                v = PyObject_GetAttr(s[in->a], s[in->b]);
                break;
            case OP_PLAIN_ATTR:
                v = PyObject_GenericGetAttr(s[in->a], s[in->b]);
                break;
            case OP_CELL: {
                PyObject* c = s[in->a];
                if (Py_IS_TYPE(c, &PyCell_Type)) {
                    v = PyCell_GET(c);
                    if (v == NULL) return 0;  // an empty cell: ValueError
                    Py_INCREF(v);
                } else {
                    v = PyObject_GetAttr(c, s[in->b]);
                }
                break;
            }
            case OP_ITEM: {
                PyObject* o = s[in->a];
                PyObject* k = s[in->b];
                if (PyDict_CheckExact(o)) {
                    v = PyDict_GetItemWithError(o, k);
                    if (v == NULL) {
                        if (PyErr_Occurred()) goto error;
                        return 0;  // KeyError
                    }
                    Py_INCREF(v);
                } else if ((PyTuple_CheckExact(o) || PyList_CheckExact(o)) && PyLong_CheckExact(k)) {
                    Py_ssize_t i = PyLong_AsSsize_t(k);
                    if (i == -1 && PyErr_Occurred()) goto error;
                    Py_ssize_t size = Py_SIZE(o);
                    if (i < 0) i += size;
                    if (i < 0 || i >= size) return 0;  // IndexError
                    v = PyTuple_CheckExact(o) ? PyTuple_GET_ITEM(o, i) : PyList_GET_ITEM(o, i);
                    Py_INCREF(v);
                } else {
                    v = PyObject_GetItem(o, k);
                }
                break;
            }
            case OP_CALL: {
                PyObject* argv[MAX_CALL_ARGS + 1];
                const int32_t* idx = p->extra + in->c;
                for (int i = 0; i < in->d; i++) argv[i + 1] = s[idx[i]];
                v = PyObject_Vectorcall(s[in->a], argv + 1,
                                        (size_t)in->d | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
                break;
            }
            case OP_TYPE:
                v = (PyObject*)Py_TYPE(s[in->a]);
                Py_INCREF(v);
                break;
            case OP_COMPARE:
                if (in->c == CMP_IS || in->c == CMP_IS_NOT || in->c >= CMP_IN) {
                    t = compare(in->c, s[in->a], s[in->b]);
                    if (t < 0) goto error;
                    v = t ? Py_True : Py_False;
                    Py_INCREF(v);
                } else {
                    v = PyObject_RichCompare(s[in->a], s[in->b], in->c);
                }
                break;
            case OP_BINARY:
                v = binary(in->c, s[in->a], s[in->b]);
                break;
            case OP_COPY:
                v = s[in->a];
                Py_INCREF(v);
                break;
            case OP_JUMP_CMP:
                t = compare(in->dst, s[in->a], s[in->b]);
                goto jump;
            case OP_JUMP_TRUTH:
                t = PyObject_IsTrue(s[in->a]);
                goto jump;
            case OP_JUMP_TYPE:
                t = (PyObject*)Py_TYPE(s[in->a]) == s[in->b];
                goto jump;
            case OP_JUMP_LEN: {
                Py_ssize_t len = PyObject_Length(s[in->a]);
                if (len < 0) goto error;
                t = len == (Py_ssize_t)in->dst;
                goto jump;
            }
            case OP_JUMP_KEYS: {
                PyObject* o = s[in->a];
                t = PyDict_CheckExact(o) ? dict_keys_equal(o, s[in->b]) : -2;
                if (t == -2) {
                    PyObject* keys = PyObject_CallOneArg(s[in->dst], o);
                    if (keys == NULL) goto error;
                    t = compare(Py_EQ, keys, s[in->b]);
                    Py_DECREF(keys);
                }
                goto jump;
            }
            case OP_JUMP:
                t = 1;
                goto jump_always;
            default:
                PyErr_SetString(PyExc_SystemError, "kiln_guard_vm: unknown opcode");
                return -1;
        }
        if (v == NULL) goto error;
        Py_XSETREF(s[in->dst], v);
        continue;
    jump:
        if (t < 0) goto error;
        if (t != in->d) continue;
    jump_always:
        if (in->c < 0) return 0;
        pc = in->c;
    }
    return 1;
error:
    if (PyErr_ExceptionMatches(PyExc_Exception)) {  // a failing access is a failing guard
        PyErr_Clear();
        return 0;
    }
    return -1;
}

// The parameters bound as the Python guard binds them: 1 bound, 0 not handled here (the Python
// guard binds them, or raises its TypeError), -1 an error
static int bind(const Program* p, PyObject** params, PyObject* const* args, Py_ssize_t nargs,
                PyObject* kwnames, PyObject** owned) {
    const int argc = p->argcount;
    if (nargs > argc && !p->varargs) return 0;
    Py_ssize_t npos = nargs < argc ? nargs : argc;
    for (Py_ssize_t i = 0; i < npos; i++) params[i] = args[i];
    int next = argc + p->kwonly;
    PyObject* kwdict = NULL;
    if (p->varargs) {
        PyObject* rest = PyTuple_New(nargs - npos);
        if (rest == NULL) return -1;
        for (Py_ssize_t i = npos; i < nargs; i++) {
            Py_INCREF(args[i]);
            PyTuple_SET_ITEM(rest, i - npos, args[i]);
        }
        owned[0] = params[next++] = rest;
    }
    if (p->varkw) {
        kwdict = PyDict_New();
        if (kwdict == NULL) return -1;
        owned[1] = params[next] = kwdict;
    }
    if (kwnames != NULL) {
        Py_ssize_t nkw = PyTuple_GET_SIZE(kwnames);
        for (Py_ssize_t k = 0; k < nkw; k++) {
            PyObject* name = PyTuple_GET_ITEM(kwnames, k);
            PyObject* value = args[nargs + k];
            int found = -1;
            for (int j = p->posonly; j < argc + p->kwonly; j++) {
                PyObject* pname = PyTuple_GET_ITEM(p->names, j);
                if (pname == name || PyUnicode_Compare(pname, name) == 0) {
                    found = j;
                    break;
                }
            }
            if (found >= 0) {
                if (params[found] != NULL) return 0;  // given twice: the Python guard's TypeError
                params[found] = value;
            } else if (kwdict != NULL) {
                if (PyDict_SetItem(kwdict, name, value) < 0) return -1;
            } else {
                return 0;
            }
        }
    }
    Py_ssize_t ndef = p->defaults ? PyTuple_GET_SIZE(p->defaults) : 0;
    for (int i = (int)npos; i < argc; i++) {
        if (params[i] != NULL) continue;
        if (i < argc - ndef) return 0;
        params[i] = PyTuple_GET_ITEM(p->defaults, i - (argc - ndef));
    }
    for (int i = argc; i < argc + p->kwonly; i++) {
        if (params[i] != NULL) continue;
        PyObject* v = NULL;
        if (p->kwdefaults != NULL) {
            v = PyDict_GetItemWithError(p->kwdefaults, PyTuple_GET_ITEM(p->names, i));
            if (v == NULL && PyErr_Occurred()) return -1;
        }
        if (v == NULL) return 0;
        params[i] = v;
    }
    return 1;
}

static PyObject* program_call(PyObject* self, PyObject* const* args, size_t nargsf,
                              PyObject* kwnames) {
    Program* p = (Program*)self;
    if (p->python == NULL) {  // (cleared by the cycle collector: nothing may call it after)
        PyErr_SetString(PyExc_RuntimeError, "kiln guard program called after it was cleared");
        return NULL;
    }
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject* stack[STACK_SLOTS];
    PyObject** s = stack;
    if (p->nslots > STACK_SLOTS) {
        s = (PyObject**)PyMem_Malloc(sizeof(PyObject*) * (size_t)p->nslots);
        if (s == NULL) return PyErr_NoMemory();
    }
    memcpy(s, PySequence_Fast_ITEMS(p->consts), sizeof(PyObject*) * (size_t)p->nconsts);
    memset(s + p->nconsts, 0, sizeof(PyObject*) * (size_t)(p->nslots - p->nconsts));
    PyObject* owned[2] = {NULL, NULL};
    int r = bind(p, s + p->nconsts, args, nargs, kwnames, owned);
    PyObject* result = NULL;
    if (r == 0) {
        result = PyObject_Vectorcall(p->python, args, nargsf, kwnames);
    } else if (r > 0) {
        r = run(p, s);
        if (r >= 0 && p->check) {  // the differential mode: the Python guard must agree
            PyObject* py = PyObject_Vectorcall(p->python, args, nargsf, kwnames);
            int t = py == NULL ? -1 : PyObject_IsTrue(py);
            Py_XDECREF(py);
            if (t < 0) {
                r = -1;
            } else if (t != r) {
                PyErr_Format(PyExc_AssertionError,
                             "kiln guard program disagrees with the Python guard "
                             "(program %s, Python %s) in %R",
                             r ? "True" : "False", t ? "True" : "False", self);
                r = -1;
            }
        }
        if (r >= 0) {
            result = r ? Py_True : Py_False;
            Py_INCREF(result);
        }
    }
    for (int i = p->nconsts + p->nparams; i < p->nslots; i++) Py_XDECREF(s[i]);
    Py_XDECREF(owned[0]);
    Py_XDECREF(owned[1]);
    if (s != stack) PyMem_Free(s);
    return result;
}

static int program_traverse(PyObject* self, visitproc visit, void* arg) {
    Program* p = (Program*)self;
    Py_VISIT(p->dict);
    Py_VISIT(p->python);
    Py_VISIT(p->consts);
    Py_VISIT(p->names);
    Py_VISIT(p->defaults);
    Py_VISIT(p->kwdefaults);
    return 0;
}

static int program_clear(PyObject* self) {
    Program* p = (Program*)self;
    Py_CLEAR(p->dict);
    Py_CLEAR(p->python);
    // (consts stay until dealloc: a call running now reads them; they hold no cycle of theirs)
    Py_CLEAR(p->defaults);
    Py_CLEAR(p->kwdefaults);
    return 0;
}

static void program_dealloc(PyObject* self) {
    Program* p = (Program*)self;
    PyObject_GC_UnTrack(self);
    if (p->weaklist != NULL) PyObject_ClearWeakRefs(self);
    program_clear(self);
    Py_CLEAR(p->consts);
    Py_CLEAR(p->names);
    PyMem_Free(p->code);
    PyMem_Free(p->extra);
    Py_TYPE(self)->tp_free(self);
}

// Program(python, consts, names, defaults, kwdefaults, code: bytes, extra: bytes, layout: tuple
// of ints (nslots, argcount, posonly, kwonly, varargs, varkw, check))
static PyObject* program_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
    PyObject *python, *consts, *names, *defaults, *kwdefaults, *layout;
    const char *code, *extra;
    Py_ssize_t ncode, nextra;
    if (!PyArg_ParseTuple(args, "OO!O!OOy#y#O!", &python, &PyTuple_Type, &consts, &PyTuple_Type,
                          &names, &defaults, &kwdefaults, &code, &ncode, &extra, &nextra,
                          &PyTuple_Type, &layout))
        return NULL;
    int v[7];
    if (PyTuple_GET_SIZE(layout) != 7 || ncode % (Py_ssize_t)sizeof(Inst) != 0 ||
        nextra % (Py_ssize_t)sizeof(int32_t) != 0) {
        PyErr_SetString(PyExc_ValueError, "Program: bad layout");
        return NULL;
    }
    for (int i = 0; i < 7; i++) {
        v[i] = (int)PyLong_AsLong(PyTuple_GET_ITEM(layout, i));
        if (v[i] == -1 && PyErr_Occurred()) return NULL;
    }
    int nconsts = (int)PyTuple_GET_SIZE(consts);
    int nparams = v[1] + v[3] + v[4] + v[5];
    if (PyTuple_GET_SIZE(names) != nparams || v[0] < nconsts + nparams ||
        (defaults != Py_None && !PyTuple_Check(defaults)) ||
        (kwdefaults != Py_None && !PyDict_Check(kwdefaults))) {
        PyErr_SetString(PyExc_ValueError, "Program: bad parameters");
        return NULL;
    }
    const Inst* insts = (const Inst*)code;
    int n = (int)(ncode / (Py_ssize_t)sizeof(Inst));
    int nx = (int)(nextra / (Py_ssize_t)sizeof(int32_t));
    for (int i = 0; i < n; i++) {  // every slot and jump in range: run() checks none of them
        const Inst* in = &insts[i];
        int bad = in->op < 0 || in->op > OP_JUMP;
        int jumps = in->op >= OP_JUMP_CMP;
        if (!jumps) bad |= in->dst < nconsts + nparams || in->dst >= v[0];
        if (in->op != OP_JUMP) bad |= in->a < 0 || in->a >= v[0];
        if (in->op == OP_ATTR || in->op == OP_PLAIN_ATTR || in->op == OP_CELL ||
            in->op == OP_ITEM || in->op == OP_COMPARE || in->op == OP_BINARY ||
            in->op == OP_JUMP_CMP || in->op == OP_JUMP_TYPE || in->op == OP_JUMP_KEYS)
            bad |= in->b < 0 || in->b >= v[0];
        if (in->op == OP_CALL) {
            bad |= in->d < 0 || in->d > MAX_CALL_ARGS || in->c < 0 || in->c + in->d > nx;
            const int32_t* idx = (const int32_t*)extra + (in->c < 0 ? 0 : in->c);
            for (int j = 0; !bad && j < in->d; j++) bad |= idx[j] < 0 || idx[j] >= v[0];
        }
        if (in->op == OP_COMPARE || in->op == OP_BINARY) bad |= in->c < 0 || in->c > CMP_NOT_IN;
        if (in->op == OP_JUMP_CMP) bad |= in->dst < 0 || in->dst > CMP_NOT_IN;
        if (in->op == OP_JUMP_KEYS) {
            bad |= in->dst < 0 || in->dst >= v[0];
            bad |= in->b >= nconsts || !PyList_CheckExact(PyTuple_GET_ITEM(consts, in->b));
        }
        if (jumps) bad |= in->c < -1 || in->c > n;
        if (bad) {
            PyErr_Format(PyExc_ValueError, "Program: bad instruction %d", i);
            return NULL;
        }
    }
    Program* p = (Program*)type->tp_alloc(type, 0);
    if (p == NULL) return NULL;
    p->vectorcall = program_call;
    p->code = (Inst*)PyMem_Malloc(ncode > 0 ? (size_t)ncode : 1);
    p->extra = (int32_t*)PyMem_Malloc(nextra > 0 ? (size_t)nextra : 1);
    if (p->code == NULL || p->extra == NULL) {
        Py_DECREF(p);
        return PyErr_NoMemory();
    }
    memcpy(p->code, code, (size_t)ncode);
    memcpy(p->extra, extra, (size_t)nextra);
    p->ncode = n;
    p->nconsts = nconsts;
    p->nparams = nparams;
    p->nslots = v[0];
    p->argcount = v[1];
    p->posonly = v[2];
    p->kwonly = v[3];
    p->varargs = v[4];
    p->varkw = v[5];
    p->check = v[6];
    Py_INCREF(python);
    p->python = python;
    Py_INCREF(consts);
    p->consts = consts;
    Py_INCREF(names);
    p->names = names;
    if (defaults != Py_None) {
        Py_INCREF(defaults);
        p->defaults = defaults;
    }
    if (kwdefaults != Py_None) {
        Py_INCREF(kwdefaults);
        p->kwdefaults = kwdefaults;
    }
    return (PyObject*)p;
}

static PyObject* program_repr(PyObject* self) {
    Program* p = (Program*)self;
    return PyUnicode_FromFormat("<kiln guard program: %d instructions, %d slots>", p->ncode,
                                p->nslots);
}

static PyObject* program_get_check(PyObject* self, void* closure) {
    return PyBool_FromLong(((Program*)self)->check);
}

static int program_set_check(PyObject* self, PyObject* value, void* closure) {
    if (value == NULL) {
        PyErr_SetString(PyExc_TypeError, "cannot delete check");
        return -1;
    }
    int t = PyObject_IsTrue(value);
    if (t < 0) return -1;
    ((Program*)self)->check = t;
    return 0;
}

static PyGetSetDef program_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {"check", program_get_check, program_set_check,
     "The differential mode: each call runs the Python guard too and raises on disagreement.",
     NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject ProgramType = {PyVarObject_HEAD_INIT(NULL, 0)};
static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT};

extern "C" PyMODINIT_FUNC PyInit_kiln_guard_vm(void) {
    ProgramType.tp_name = "kiln_guard_vm.Program";
    ProgramType.tp_doc = "A guard function compiled to instructions, run in C.";
    ProgramType.tp_basicsize = sizeof(Program);
    ProgramType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_HAVE_GC;
    ProgramType.tp_vectorcall_offset = offsetof(Program, vectorcall);
    ProgramType.tp_dictoffset = offsetof(Program, dict);
    ProgramType.tp_weaklistoffset = offsetof(Program, weaklist);
    ProgramType.tp_call = PyVectorcall_Call;
    ProgramType.tp_new = program_new;
    ProgramType.tp_dealloc = program_dealloc;
    ProgramType.tp_traverse = program_traverse;
    ProgramType.tp_clear = program_clear;
    ProgramType.tp_repr = program_repr;
    ProgramType.tp_getattro = PyObject_GenericGetAttr;
    ProgramType.tp_setattro = PyObject_GenericSetAttr;
    ProgramType.tp_getset = program_getset;
    ProgramType.tp_free = PyObject_GC_Del;
    if (PyType_Ready(&ProgramType) < 0) return NULL;
    module_def.m_name = "kiln_guard_vm";
    module_def.m_size = -1;
    PyObject* m = PyModule_Create(&module_def);
    if (m == NULL) return NULL;
    Py_INCREF(&ProgramType);
    if (PyModule_AddObject(m, "Program", (PyObject*)&ProgramType) < 0) return NULL;
    return m;
}
"""

_lock = threading.Lock()
_state = {"module": None, "thread": None, "failed": None}


def flags(include=None):
    """Compiler flags: Python's headers only (`include`: another Python's, to test a build)."""
    include = include or sysconfig.get_paths().get("include") or ""
    if not os.path.exists(os.path.join(include, "Python.h")):
        raise toolchain.CompilerError(f"Python.h not found in {include!r}")
    return [f"-I{include}", "-O2", "-Wall", "-Wno-missing-field-initializers"]


@functools.lru_cache(None)
def _source():
    return f"// CPython {sys.version_info[0]}.{sys.version_info[1]}\n{SOURCE}"


def module(wait=False):
    """The loaded extension, or None while it is being built (or cannot be); the first call
    starts the build in a background thread, or loads a build already on disk at once."""
    if not config.cpp_guards:
        return None
    return toolchain.background_extension(
        _state, _lock, "kiln_guard_vm", _source(), flags, "guard_vm", wait=wait
    )
